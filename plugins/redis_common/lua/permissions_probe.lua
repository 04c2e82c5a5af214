-- permissions_probe: each command dlock runs, with sample arguments on the probe keys, that the
-- current user may not run (Redis 7 ACLs). Run by EVAL at open (scripts.cpp check_permissions) on
-- the keys of the name "", which no lock has. Writes nothing.
-- KEYS[1]  the probe's lock key
-- KEYS[2]  the probe's fence key
-- KEYS[3]  the probe's channel
-- KEYS[4]  the probe's waiter queue
-- ARGV[1]  '1' when the waiter queue's sorted-set commands are needed too, else '0'
-- Returns a list of what is denied ("SUBSCRIBE <channel>", "GET <key>", ...; empty when nothing
-- is), or false on a server without redis.acl_check_cmd (before Redis 7), where there is nothing
-- to ask.
-- Includes: none
if not redis.acl_check_cmd then return false end
local denied = {}
local function need(what, ...)
  if not redis.acl_check_cmd(...) then table.insert(denied, what) end
end
need('EVALSHA ' .. KEYS[1], 'EVALSHA', '0000000000000000000000000000000000000000', '3', KEYS[1], KEYS[2], KEYS[3])
need('GET ' .. KEYS[1], 'GET', KEYS[1])
need('SET ' .. KEYS[1], 'SET', KEYS[1], 'owner', 'PX', '1')
need('PTTL ' .. KEYS[1], 'PTTL', KEYS[1])
need('PEXPIRE ' .. KEYS[1], 'PEXPIRE', KEYS[1], '1')
need('DEL ' .. KEYS[1], 'DEL', KEYS[1])
need('GET ' .. KEYS[2], 'GET', KEYS[2])
need('SET ' .. KEYS[2], 'SET', KEYS[2], '1')
need('INCR ' .. KEYS[2], 'INCR', KEYS[2])
need('TIME', 'TIME')
if ARGV[1] == '1' then
  need('ZADD ' .. KEYS[4], 'ZADD', KEYS[4], '1', 'owner')
  need('ZREM ' .. KEYS[4], 'ZREM', KEYS[4], 'owner')
  need('ZRANGE ' .. KEYS[4], 'ZRANGE', KEYS[4], '0', '0')
  need('ZRANGEBYSCORE ' .. KEYS[4], 'ZRANGEBYSCORE', KEYS[4], '-inf', '0')
  need('ZSCORE ' .. KEYS[4], 'ZSCORE', KEYS[4], 'owner')
end
need('PUBLISH ' .. KEYS[3], 'PUBLISH', KEYS[3], 'released')
need('SUBSCRIBE ' .. KEYS[3], 'SUBSCRIBE', KEYS[3])
return denied
