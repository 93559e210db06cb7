-- view_apply: store an order view if its aggregate_version is newer.
-- KEYS[1] view hash
-- ARGV[1] aggregate_version, ARGV[2] ttl ms (<= 0: none),
-- ARGV[3..] field/value pairs (aggregate_version included), the last pair
-- being apply_call and the call's token (new per call)
-- Returns 1 when stored (also when this call runs again after its reply
-- was lost: the stored apply_call is its token), 0 when the stored version
-- is the same or newer.
local cur = redis.call('HMGET', KEYS[1], 'aggregate_version', 'apply_call')
if cur[1] and tonumber(cur[1]) >= tonumber(ARGV[1]) then
  if cur[1] == ARGV[1] and cur[2] == ARGV[#ARGV] then
    return 1
  end
  return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
if tonumber(ARGV[2]) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
