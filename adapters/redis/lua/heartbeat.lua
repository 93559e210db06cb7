-- heartbeat: record one consumer instance as live and count the live ones
-- (ports.ConsumerPeers). One sorted set of instance -> last heartbeat (ms
-- on the Redis server's clock).
-- KEYS[1] the instances set
-- ARGV[1] instance id
-- ARGV[2] ttl ms: instances whose last heartbeat is older are forgotten
-- ARGV[3] now ms (0: use the server's TIME)
-- Returns the number of live instances, the caller included.
local now = tonumber(ARGV[3])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - ttl))
redis.call('PEXPIRE', KEYS[1], 2 * ttl)
return redis.call('ZCARD', KEYS[1])
