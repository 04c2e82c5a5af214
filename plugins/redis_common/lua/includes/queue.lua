local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local function drop_lapsed(now)
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now, 'LIMIT', 0, 100)
  if #lapsed > 0 then
    redis.call('ZREM', KEYS[3], unpack(lapsed))
    redis.call('ZREM', KEYS[4], unpack(lapsed))
    return true
  end
  return false
end
-- Wakes `member` and gives it claim_ms: true when it is heard or young enough to be kept.
local function wake_member(member, arrival_us, now, now_us, claim_ms, prefix)
  local heard = redis.call('PUBLISH', prefix .. member, 'next') > 0
  if not heard and now_us - tonumber(arrival_us) >= claim_ms * 1000 then return false, false end
  local lapses = tonumber(redis.call('ZSCORE', KEYS[4], member))
  if lapses == nil or lapses > now + claim_ms then redis.call('ZADD', KEYS[4], now + claim_ms, member) end
  return true, heard
end
local function wake_standby(rank, prefix, caller)
  local standby = redis.call('ZRANGE', KEYS[3], rank, rank)[1]
  if standby and standby ~= caller then redis.call('PUBLISH', prefix .. standby, 'standby') end
end
local function wake_next(now, now_us, claim_ms, prefix, caller)
  for _ = 1, 10 do
    local first = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')
    if #first == 0 or first[1] == caller then return end
    if wake_member(first[1], first[2], now, now_us, claim_ms, prefix) then
      wake_standby(1, prefix, caller)
      return
    end
    redis.call('ZREM', KEYS[3], first[1])
    redis.call('ZREM', KEYS[4], first[1])
  end
end
-- Queues member at score (keep_earlier_score: one already queued keeps its place), lapsing keep ms
-- from now; the queue's keys live at least that long.
local function queue_member(member, score, keep, now, keep_earlier_score)
  if keep_earlier_score then redis.call('ZADD', KEYS[3], 'NX', score, member) else redis.call('ZADD', KEYS[3], score, member) end
  redis.call('ZADD', KEYS[4], now + keep, member)
  if redis.call('PTTL', KEYS[4]) < keep then
    redis.call('PEXPIRE', KEYS[3], keep)
    redis.call('PEXPIRE', KEYS[4], keep)
  end
end
local function enqueue(member, now, now_us, wait_ms, grace_ms)
  queue_member(member, now_us, math.max(wait_ms, 0) + grace_ms, now, true)
end
-- ms until the soonest lapse among the first `count` (at most 100) waiters; 0 when none queue.
local function soonest_lapse_in(count, now)
  local soonest
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, math.min(count, 100) - 1)) do
    local lapses = tonumber(redis.call('ZSCORE', KEYS[4], m))
    if lapses and (soonest == nil or lapses < soonest) then soonest = lapses end
  end
  return soonest and math.max(0, soonest - now) or 0
end
local function first_lapses_in(now)
  return soonest_lapse_in(1, now)
end
-- ms until the last waiter's entry lapses; -1 when nobody queues.
local function last_lapse_in(now)
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  return last[2] and tonumber(last[2]) - now or -1
end
-- Publishes on `member`'s channel and gives it claim_ms, heard or not (its entry then lapses
-- within a claim, and the next retry of anyone drops it if it did not come).
local function nudge_member(member, now, claim_ms, prefix)
  redis.call('PUBLISH', prefix .. member, 'next')
  redis.call('ZADD', KEYS[4], now + claim_ms, member)
end
local function wake_first(n, now, now_us, claim_ms, prefix, caller, only_unwoken)
  if n <= 0 then return end
  local rank, dropped, woke = 0, 0, false
  n = math.min(n, 100)
  while rank < n and dropped < 10 do
    local entry = redis.call('ZRANGE', KEYS[3], rank, rank, 'WITHSCORES')
    if #entry == 0 then return end
    local lapses = only_unwoken and tonumber(redis.call('ZSCORE', KEYS[4], entry[1]))
    if entry[1] == caller or (lapses and lapses <= now + claim_ms) then
      rank = rank + 1
    elseif only_unwoken then
      nudge_member(entry[1], now, claim_ms, prefix)
      rank, woke = rank + 1, true
    else
      local kept, heard = wake_member(entry[1], entry[2], now, now_us, claim_ms, prefix)
      if kept then
        rank, woke = rank + 1, true
        if not heard then n = n + 1 end
      else
        redis.call('ZREM', KEYS[3], entry[1])
        redis.call('ZREM', KEYS[4], entry[1])
        dropped = dropped + 1
      end
    end
  end
  if woke or not only_unwoken then wake_standby(rank, prefix, caller) end
end
local function wake_sleeping_head(now, now_us, claim_ms, prefix, caller)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not first or first == caller then return end
  local lapses = tonumber(redis.call('ZSCORE', KEYS[4], first))
  if lapses == nil or lapses > now + claim_ms then
    nudge_member(first, now, claim_ms, prefix)
    wake_standby(1, prefix, caller)
  end
end
