-- break: an administrator's break: removes every holder of a lock or every permit of a semaphore.
-- KEYS[1]  the lock key, or the semaphore's permits key
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- KEYS[5]  the broadcast channel
-- ARGV[1]  'lock' | 'semaphore'
-- ARGV[2]  claim_ms given to woken waiters
-- ARGV[3]  the waiters' channel prefix
-- ARGV[4]  'tombstone' for a lock without fencing tokens (redlock), or absent
-- Returns the number of holders removed; an error (NOPERM) when the user may not break.
-- Needs UNLINK on the key, a command dlock's tenants are not granted (see docs/backends/redis.md,
-- "Listing and breaking locks"), and for a tombstone SET too: refused with NOPERM before any
-- write - from Redis 7.0 by the ACL guard at the top (redis.acl_check_cmd, both commands: a
-- script's writes are not rolled back, so UNLINK done and SET refused would leave the name free
-- beside the broken holder), before it by the UNLINK itself, which every branch runs before it
-- writes to the key (a tenant without it may only run the waiter queue's upkeep, drop_lapsed, as
-- its own acquires do).
-- Fenced by construction: every grant INCRs the fence key, so the next one is above every broken
-- holder's token.
-- 'tombstone' (redlock, no tokens): fenced by time instead. The holders' key becomes the string
-- break_tombstone (redis_common.hpp), expiring when the longest-lived holder's lease
-- would have (the exclusive key's PTTL; a shared set's highest live score), so every acquire
-- script finds the name held until then and its waiters sleep on that PTTL, as on a holder's;
-- renewals and releases find their value or member gone. Nothing is published and nobody is
-- woken: nothing is free before the tombstone expires. A tombstone is no holder, and a break
-- leaves one as it is (count 0).
-- Includes: includes/queue.lua, includes/shared.lua, includes/semaphore.lua
--!include "includes/queue.lua"
--!include "includes/shared.lua"
--!include "includes/semaphore.lua"
if redis.acl_check_cmd and not redis.acl_check_cmd('UNLINK', KEYS[1]) then
  return redis.error_reply('NOPERM this user may not break dlock locks: it may not run UNLINK on ' .. KEYS[1])
end
if redis.acl_check_cmd and ARGV[4] == 'tombstone' and not redis.acl_check_cmd('SET', KEYS[1], 'x', 'PX', '1') then
  return redis.error_reply('NOPERM this user may not break dlock locks: it may not run SET on ' .. KEYS[1])
end
local now, now_us = server_time()
local count = 0
local limit
local v = redis.pcall('GET', KEYS[1])
if ARGV[4] == 'tombstone' then
  if not v or v == 'dlock:broken' then return 0 end
  local ends = -1
  if type(v) == 'string' then
    count = 1
    ends = redis.call('PTTL', KEYS[1])
  else
    local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf', 'WITHSCORES')
    count = #live / 2
    if count > 0 then ends = math.ceil(tonumber(live[#live]) - now) end
  end
  -- UNLINK first, although SET alone would replace the key: it is the permission check on servers
  -- before Redis 7.0, which have no redis.acl_check_cmd (the guard above is skipped there). Every
  -- tenant may SET dlock's keys but not UNLINK them, so a tombstone written by SET alone would let
  -- any tenant break any lock there; a refused UNLINK fails the script before anything is written.
  -- The script is atomic: nobody sees the name free between the two.
  redis.call('UNLINK', KEYS[1])
  if ends > 0 then redis.call('SET', KEYS[1], 'dlock:broken', 'PX', ends) end
  return count
end
if type(v) == 'string' then
  count = 1
elseif v then
  limit = stored_limit()
  count = #live_members(now)
end
if v then
  redis.call('PUBLISH', KEYS[5], 'released')
  redis.call('UNLINK', KEYS[1])
end
drop_lapsed(now)
if ARGV[1] == 'semaphore' then
  local queued = redis.call('PTTL', KEYS[3])
  if limit and queued > 0 then
    redis.call('ZADD', KEYS[1], '-inf', 'limit:' .. limit)
    redis.call('PEXPIRE', KEYS[1], queued)
    wake_first(limit, now, now_us, tonumber(ARGV[2]), ARGV[3])
  end
else
  wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3])
end
return count
