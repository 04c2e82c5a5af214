local holder = redis.pcall('GET', KEYS[1])
if type(holder) == 'table' then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1)[1]
  holder = last and string.match(last, '^(.*):%d+$') or false
end
return {holder, redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2])}
