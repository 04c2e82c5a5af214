-- shared_acquire: a shared hold of a lock (its member joins the sorted set at the lock key).
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- ARGV[1]  owner token (queued as "s:<owner>"; its member is "<owner>:<token>")
-- ARGV[2]  ttl in ms
-- ARGV[3]  mode, as queue_acquire.lua (0 barging, 1 fair try, 2 fair wait)
-- ARGV[4]  entry_grace_ms
-- ARGV[5]  claim_ms; on redlock the time a reader shortens writers' marks to (shorten_marks)
-- ARGV[6]  the waiters' channel prefix ("" on redlock: no waiter channels)
-- ARGV[7]  'untokened' (redlock: the member's token is 0 and the fence key is not touched), or absent
-- Granted when nobody holds the lock exclusively and (mode 0) or no exclusive waiter queues before
-- this one (FIFO between shared and exclusive waiters: a queued writer stops new readers; readers
-- in a row are admitted together, each granted one waking the next). A fair waiter refused while
-- the lock is free, or held shared with a reader first, wakes the first waiter if nobody did
-- (wake_sleeping_head; not on redlock, whose prefix is "": its queue holds only writers' marks;
-- there a reader refused by marks while the lock is free shortens them, shorten_marks, and waits
-- until the first one lapses).
-- Returns
--   {1, token}       granted (token 0 when 'untokened')
--   {0, wait_ms, 1}  held exclusively, or shared with a writer queued before us: wait_ms until
--                    the lock key expires
--   {0, wait_ms, 0}  free but others queue first: wait_ms until the first waiter's entry lapses
--   an error         a fence key that holds no token (as acquire.lua)
-- Includes: includes/grant.lua, includes/queue.lua, includes/shared.lua
--!include "includes/grant.lua"
--!include "includes/queue.lua"
--!include "includes/shared.lua"
-- Redlock (no waiter channels; the queue holds only waiting writers' marks): a reader kept from a
-- free lock by marks cuts the first 100 to keep_ms (ARGV[5]: a claim + 2 x command_timeout +
-- retry_delay, no less than a live writer's longest interval between two marks): each then lapses
-- within keep_ms unless its writer marks again, which a live one does with the round it runs on
-- hearing the same release (or at the latest when its sleep, shorter than its mark, ends). A paused
-- writer's mark thus stops readers from a free lock for keep_ms, not for its holders' ttl.
local function shorten_marks(now, keep_ms)
  for _, m in ipairs(redis.call('ZRANGE', KEYS[3], 0, 99)) do
    local lapses = tonumber(redis.call('ZSCORE', KEYS[4], m))
    if lapses and lapses > now + keep_ms then redis.call('ZADD', KEYS[4], now + keep_ms, m) end
  end
end
local mode = tonumber(ARGV[3])
local me = 's:' .. ARGV[1]
local ttl = tonumber(ARGV[2])
local now, now_us = server_time()
if mode > 0 then drop_lapsed(now) end
local holder = lock_holder(now)
local blocked = holder and holder ~= true
if not blocked and mode > 0 then
  blocked = writer_ahead(me)
  -- Others first may take a free lock (or join the shared holders, if a reader is first).
  if blocked and ARGV[6] ~= '' then
    local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if not holder or string.sub(first, 1, 2) == 's:' then wake_sleeping_head(now, now_us, tonumber(ARGV[5]), ARGV[6], me) end
  elseif blocked and not holder then
    shorten_marks(now, tonumber(ARGV[5]))  -- redlock: writers' marks keep this reader from a free lock
  end
end
if not blocked then
  local token, why = 0, nil
  if ARGV[7] ~= 'untokened' then token, why = next_token(KEYS[2]) end  -- redlock: no token, no INCR
  if not token then return corrupt_fence(KEYS[2], why) end
  if holder == true then drop_expired_members(now) end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[1] .. ':' .. string.format('%d', token))
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  if redis.call('ZREM', KEYS[3], me) == 1 then
    redis.call('ZREM', KEYS[4], me)
    wake_reader_at_head(now, now_us, tonumber(ARGV[5]), ARGV[6])
  end
  return {1, token}
end
local wait_ms
if holder then wait_ms = redis.call('PTTL', KEYS[1]) else wait_ms = first_lapses_in(now) end
if mode == 2 then enqueue(me, now, now_us, wait_ms, tonumber(ARGV[4])) end
return {0, wait_ms, holder and 1 or 0}
