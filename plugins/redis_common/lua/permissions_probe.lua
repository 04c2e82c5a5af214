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
