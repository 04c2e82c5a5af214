-- mark_waiting_writer: redlock's writer preference without a queue of waiters: an exclusive waiter
-- refused by the nodes marks itself waiting in each node's queue (a writer entry lapsing ARGV[2] ms
-- from now unless marked again), which stops new shared holders there (shared_acquire.lua in mode
-- 1), and unmarks itself when it is done waiting.
-- KEYS[1]  the lock key (not read)
-- KEYS[2]  the fence key (not read)
-- KEYS[3]  the waiter queue
-- KEYS[4]  the queue's lapses
-- ARGV[1]  the writer's queue entry (its owner)
-- ARGV[2]  keep_ms: how long the mark lasts
-- ARGV[3]  'mark' | 'unmark'
-- Returns 1.
-- Includes: includes/queue.lua
--!include "includes/queue.lua"
local now, now_us = server_time()
drop_lapsed(now)
if ARGV[3] == 'unmark' then
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('ZREM', KEYS[4], ARGV[1])
else
  enqueue(ARGV[1], now, now_us, 0, tonumber(ARGV[2]))
end
return 1
