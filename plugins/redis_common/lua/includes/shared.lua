-- Include: shared holders of a lock. Needs includes/queue.lua before it (wake_first).
-- The lock key KEYS[1] holds the exclusive holder's owner token (a string), or the shared holders
-- (a sorted set of "<owner>:<fencing token>" scored by the server time, ms, each lease ends); the
-- key expires with its longest-lived holder. A shared holder is queued (KEYS[3]) as "s:<owner>".
-- GET on the set fails with WRONGTYPE: the exclusive scripts read the key with pcall, so the check
-- they always made finds it held, at no extra command.
-- A token goes into a member through string.format('%d'): Lua's own number-to-text keeps only 14
-- significant digits, and tokens (seeded with the server time in us) have 16.
--
-- lock_holder(now) -> the owner token, true when live shared holders exist, false when free (a set
--   of expired holders only is deleted).
-- writer_ahead(member) -> true when an exclusive waiter queues before `member` (anywhere in the
--   queue when `member` is not queued). It reads the entries before `member` from the head, 100 at
--   a time, and at most 1 000 of them (a script's cost stays bounded): when 1 000 or more are
--   before it, it answers true, so a reader that far back waits as if behind a writer until the
--   queue before it is shorter - never overtaking one. (Entries of `member`'s own score that sort
--   before it, by member, are before it too.)
-- wake_reader_at_head(now, now_us, claim_ms, prefix): a shared waiter first in the queue is woken
--   (it can join the holders).
-- drop_expired_members(now): removes up to 100 members of KEYS[1] whose lease ended.
-- expire_with_members(now, floor_ms): KEYS[1] lives as long as its longest-lived member, and at
--   least floor_ms; deleted when neither keeps it (nothing left, or no time left).
local function lock_holder(now)
  local v = redis.pcall('GET', KEYS[1])
  if type(v) ~= 'table' then return v end
  if #redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'LIMIT', 0, 1) > 0 then return true end
  redis.call('DEL', KEYS[1])
  return false
end
local function writer_ahead(member)
  local mine = redis.call('ZSCORE', KEYS[3], member)
  for offset = 0, 900, 100 do
    local ahead
    if mine then
      ahead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. mine, 'LIMIT', offset, 100)
    else
      ahead = redis.call('ZRANGE', KEYS[3], offset, offset + 99)
    end
    for _, m in ipairs(ahead) do
      if string.sub(m, 1, 2) ~= 's:' then return true end
    end
    if #ahead < 100 then
      if mine then
        for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], mine, mine, 'LIMIT', 0, 100)) do
          if m < member and string.sub(m, 1, 2) ~= 's:' then return true end
        end
      end
      return false
    end
  end
  return true
end
local function wake_reader_at_head(now, now_us, claim_ms, prefix)
  local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
  if first and string.sub(first, 1, 2) == 's:' then wake_first(1, now, now_us, claim_ms, prefix) end
end
local function drop_expired_members(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '(-inf', now, 'LIMIT', 0, 100)
  if #expired > 0 then redis.call('ZREM', KEYS[1], unpack(expired)) end
end
-- The key lives as long as its longest-lived member, and at least `floor_ms`; gone when nothing is left.
local function expire_with_members(now, floor_ms)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  local keep = floor_ms
  if last[1] and string.sub(last[1], 1, 6) ~= 'limit:' then keep = math.max(keep, tonumber(last[2]) - now) end
  if keep > 0 and #last > 0 then redis.call('PEXPIRE', KEYS[1], math.ceil(keep))
  else redis.call('DEL', KEYS[1]) end
end
