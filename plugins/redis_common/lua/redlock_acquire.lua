local function grant(before_set)
  if before_set then before_set() end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {1, 0}
end
local mode = tonumber(ARGV[5])
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
local holder  -- nil until read
if not first then
  holder = redis.pcall('GET', KEYS[1])
  if not holder then return grant(nil) end
end
--!include "includes/queue.lua"
--!include "includes/shared.lua"
local now, now_us = server_time()
if first then
  drop_lapsed(now)
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if holder == nil then holder = redis.pcall('GET', KEYS[1]) end
if type(holder) == 'table' then holder = lock_holder(now) end
local fair = mode == 1 or mode == 2
if not holder and fair and first and first ~= ARGV[3] then
  wake_sleeping_head(now, now_us, tonumber(ARGV[7]), ARGV[8], ARGV[3])
  first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
end
if not holder and (not fair or first == nil or first == ARGV[3]) then
  return grant(function()
    if first and redis.call('ZREM', KEYS[3], ARGV[3]) == 1 then redis.call('ZREM', KEYS[4], ARGV[3]) end
  end)
end
local wait_ms
if holder then wait_ms = redis.call('PTTL', KEYS[1]) else wait_ms = first_lapses_in(now) end
if mode >= 2 then queue_member(ARGV[3], ARGV[4], math.max(wait_ms, 0) + tonumber(ARGV[6]), now, false) end
return {0, wait_ms, holder == true and 1 or 0, holder and 1 or 0, now_us}
