-- view_apply: store an order view if its aggregate_version is newer.
-- KEYS[1] view hash
-- ARGV[1] aggregate_version, ARGV[2] ttl ms (<= 0: none),
-- ARGV[3..] field/value pairs (aggregate_version included)
-- Returns 1 when stored, 0 when the stored version is the same or newer.
local cur = redis.call('HGET', KEYS[1], 'aggregate_version')
if cur and tonumber(cur) >= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
