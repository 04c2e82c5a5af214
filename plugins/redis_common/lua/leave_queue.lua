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
