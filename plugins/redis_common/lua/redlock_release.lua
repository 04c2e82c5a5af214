-- redlock_release: redlock's release of an exclusive hold on one node, also used to give back what
-- a failed round got.
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- KEYS[5]  the broadcast channel
-- ARGV[1]  the round's value (the lock key's value while held)
-- ARGV[2]  claim_ms given to the woken waiter
-- ARGV[3]  the waiters' channel prefix
-- ARGV[4]  the waiter's queue member ("" none)
-- ARGV[5]  its score
-- ARGV[6]  entry_grace_ms
-- ARGV[7]  'release' | 'give back'
-- A holder's release ('release') removes the holder's entry where it is still queued with this
-- acquisition's score: the nodes that refused its winning round queued it, and that stale entry
-- would stand first there. A failed round's give-back ('give back') puts the waiter back in the
-- queue with its own score (the grant removed its entry), so it keeps its place there. Then the
-- first waiter is woken unless it is the one giving back, which retries anyway; the broadcast
-- channel still wakes shared waiters. DEL last: see release.lua.
-- Returns 1 released | 0 gone (no key) | -1 another holder's (a value, shared holders' set) |
-- -3 a break's tombstone: as queue_release.lua.
-- Nobody queued (the uncontended case): released before the queue's functions are defined.
-- Includes: includes/queue.lua
local giving_back = ARGV[7] == 'give back'
local queued = redis.call('ZRANGE', KEYS[3], 0, 0)[1] ~= nil
if not queued and not giving_back then
  local v = redis.pcall('GET', KEYS[1])
  if v ~= ARGV[1] then return v == 'dlock:broken' and -3 or v and -1 or 0 end
  redis.call('PUBLISH', KEYS[5], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
--!include "includes/queue.lua"
if queued and not giving_back and ARGV[4] ~= '' and tonumber(redis.call('ZSCORE', KEYS[3], ARGV[4])) == tonumber(ARGV[5]) then
  redis.call('ZREM', KEYS[3], ARGV[4])
  redis.call('ZREM', KEYS[4], ARGV[4])
end
local v = redis.pcall('GET', KEYS[1])
if v ~= ARGV[1] then return v == 'dlock:broken' and -3 or v and -1 or 0 end
redis.call('PUBLISH', KEYS[5], 'released')
local now, now_us = server_time()
if giving_back and ARGV[4] ~= '' then queue_member(ARGV[4], ARGV[5], tonumber(ARGV[6]), now, false) end
drop_lapsed(now)
local first = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if first and not (giving_back and first == ARGV[4]) then wake_next(now, now_us, tonumber(ARGV[2]), ARGV[3]) end
redis.call('DEL', KEYS[1])
return 1
