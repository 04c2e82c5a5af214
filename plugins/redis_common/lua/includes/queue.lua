-- Include: the waiter queue of a lock or a semaphore. Includes no other file.
-- Uses KEYS[3] the queue: a sorted set mapping each waiting owner token (or queue entry) to its
-- arrival (server time, us); KEYS[4] the queue's lapses: each entry to the server time (ms) at
-- which it lapses unless its waiter renews it by retrying. A waiter's channel is prefix .. entry.
--
-- server_time() -> now (ms), now_us (us): the server's TIME.
-- drop_lapsed(now) -> true when it removed lapsed entries (a waiter that died or gave up without
--   leaving): at most 100 per call, so a script's cost stays bounded.
-- wake_member(member, arrival_us, now, now_us, claim_ms, prefix) -> kept, heard.
-- wake_standby(rank, prefix, caller): hints the waiter at `rank` (the message 'standby').
-- wake_next(now, now_us, claim_ms, prefix, caller): publishes on the first waiter's channel and
--   gives it claim_ms to take the lock before its entry lapses. A first waiter nobody hears on its
--   channel (its client died and its connection with it) is dropped and the next one woken
--   instead, up to 10 in one call - unless it queued less than claim_ms ago: a waiter subscribes
--   only after its first attempt queued it, and retries once it has, so it is kept.
--   A first waiter that is heard may still never come (a paused process keeps its connection, and
--   redlock's per-thread channel stays subscribed after its wait), so the waiter after it, the
--   standby, is told too (the message 'standby', redis_common.hpp standby_message): it retries
--   when the first one's claim lapses unless woken before, and then takes over, its retry dropping
--   the lapsed entry. (A live waiter dropped, its pub/sub connection being restored, queues again
--   at the back with its next retry, which follows the restored subscription at once.) `caller`
--   (or nil) is the waiter whose own script runs this: it is awake, and never published to.
-- queue_member(member, score, keep, now, keep_earlier_score), enqueue(member, now, now_us,
--   wait_ms, grace_ms): queue an entry (see each function).
-- soonest_lapse_in(count, now), first_lapses_in(now), last_lapse_in(now): ms until entries lapse.
-- nudge_member(member, now, claim_ms, prefix): wakes `member` and gives it claim_ms, heard or not.
-- wake_first(n, now, now_us, claim_ms, prefix, caller, only_unwoken): does what wake_next does for
--   the first n waiters (a semaphore's free permits; a reader at the head): each is woken with its
--   claim, one nobody hears and older than a claim is dropped (at most 10), and the waiter after
--   them is woken as their standby. With `only_unwoken` (a waiter's retry that found the first
--   ones still asleep) it wakes only those whose entries lapse later than a claim from now -
--   nobody woke them since they last retried - giving each its claim whether heard or not (a retry
--   drops nobody: an entry nobody hears lapses after its claim), and wakes the standby only when
--   it woke one.
-- wake_sleeping_head(now, now_us, claim_ms, prefix, caller): called by a waiter's retry that found
--   the lock free to others queued first; wakes the first waiter with its claim (and hints its
--   standby) unless it was woken and has not retried since (its entry lapses within a claim). It
--   was made first without being woken: the entry before it lapsed, shared holders left (a shared
--   release on redlock wakes nobody by name), or the holder's key expired.
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
-- (now_us unused: it takes the arguments the other wake functions take.)
local function wake_sleeping_head(now, now_us, claim_ms, prefix, caller)  -- luacheck: ignore 212/now_us
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if not first or first == caller then return end
  local lapses = tonumber(redis.call('ZSCORE', KEYS[4], first))
  if lapses == nil or lapses > now + claim_ms then
    nudge_member(first, now, claim_ms, prefix)
    wake_standby(1, prefix, caller)
  end
end
