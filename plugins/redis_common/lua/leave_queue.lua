-- leave_queue: a queued waiter leaves without the lock; the waiters it held up are woken: of a
-- lock, the first waiter when the lock is free, or a shared waiter now first while shared holders
-- hold it; of a semaphore, as many as there are free permits, and the set's key then lives as long
-- as its longest-lived permit or waiter (gone, with the limit, when neither is left). (The one
-- leaving may have been woken for them.)
-- KEYS[1]  the lock key, or the semaphore's permits key
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- ARGV[1]  the leaving waiter's queue entry (owner token; "s:<owner>" for a shared waiter)
-- ARGV[2]  claim_ms given to woken waiters
-- ARGV[3]  the waiters' channel prefix
-- ARGV[4]  'semaphore' for a semaphore's queue, else 'lock'
-- Returns 1 when the entry was there, else 0.
-- Includes: includes/queue.lua, includes/shared.lua, includes/semaphore.lua
--!include "includes/queue.lua"
--!include "includes/shared.lua"
--!include "includes/semaphore.lua"
local removed = redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
local now, now_us = server_time()
local claim_ms = tonumber(ARGV[2])
if ARGV[4] == 'semaphore' then
  drop_lapsed(now)
  wake_first(permits_free(now), now, now_us, claim_ms, ARGV[3])
  expire_with_members(now, last_lapse_in(now))  -- the limit goes with the last waiter, if no permit is live
else
  local holder = lock_holder(now)
  if not holder then
    drop_lapsed(now)
    wake_next(now, now_us, claim_ms, ARGV[3])
  elseif holder == true then
    wake_reader_at_head(now, now_us, claim_ms, ARGV[3])
  end
end
return removed
