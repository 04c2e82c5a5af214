if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  redis.call('PUBLISH', KEYS[3], 'released')
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
