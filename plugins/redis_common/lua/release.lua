-- release: releases an exclusive hold, without a waiter queue.
-- KEYS[1]  the lock key
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the channel waiters subscribe to (a key so it shares the slot)
-- ARGV[1]  owner token
-- Returns 1 released | 0 not ours (another value, no key, a set of shared holders).
-- PUBLISH before DEL: if the user may not publish on the channel (an ACL changed after open), the
-- script fails before it deleted anything, so the release is refused whole - never half done with
-- the lock gone and the caller told it failed. Waiters woken by the message run after the script.
-- Includes: none
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PUBLISH', KEYS[3], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
