--!include "includes/grant.lua"
local mode = tonumber(ARGV[3])
local first
if mode > 0 then first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] end
local held = redis.pcall('GET', KEYS[1])
if not held and not first then return grant(nil) end
--!include "includes/queue.lua"
--!include "includes/shared.lua"
local now, now_us
if first then
  now, now_us = server_time()
  if drop_lapsed(now) then first = redis.call('ZRANGE', KEYS[3], 0, 0)[1] end
end
if type(held) == 'table' then
  if not now then now, now_us = server_time() end
  held = lock_holder(now)
end
if not held and mode > 0 and first and first ~= ARGV[1] then
  wake_sleeping_head(now, now_us, tonumber(ARGV[5]), ARGV[6], ARGV[1])
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if not held and (mode == 0 or first == nil or first == ARGV[1]) then
  return grant(function()
    if first == ARGV[1] then
      redis.call('ZREM', KEYS[3], ARGV[1])
      redis.call('ZREM', KEYS[4], ARGV[1])
    end
  end)
end
if not now then now, now_us = server_time() end
local wait_ms
if held then
  wait_ms = redis.call('PTTL', KEYS[1])
else
  wait_ms = first_lapses_in(now)
end
if mode == 2 then enqueue(ARGV[1], now, now_us, wait_ms, tonumber(ARGV[4])) end
return {0, wait_ms, held and 1 or 0}
