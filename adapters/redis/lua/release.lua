-- release: give the reservation's unit back, exactly once (I4).
-- KEYS[1] reservation hash, KEYS[2] stock, KEYS[3] holders, KEYS[4] pending,
-- KEYS[5] unresolved, KEYS[6] pending_created
-- ARGV[1] reservation_id, ARGV[2] release reason, ARGV[3] call token (new
-- per call, stored as release_call), ARGV[4] retention ms (> 0: the
-- released reservation's hash expires that long after the release)
-- Returns 1 when this call released it (also when it runs again after its
-- reply was lost: release_call is its token), 0 when it was RELEASED
-- already, -1 when the reservation is unknown.
local v = redis.call('HMGET', KEYS[1], 'status', 'user_id', 'release_call')
if not v[1] then
  return -1
end
if v[1] == 'RELEASED' then
  if v[3] == ARGV[3] then
    return 1
  end
  return 0
end
redis.call('INCR', KEYS[2])
if v[2] and redis.call('HGET', KEYS[3], v[2]) == ARGV[1] then
  redis.call('HDEL', KEYS[3], v[2])
end
redis.call('HSET', KEYS[1], 'status', 'RELEASED', 'release_reason', ARGV[2],
  'lease_owner', '', 'lease_until', '0', 'release_call', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'version', 1)
if tonumber(ARGV[4] or '0') > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[1])
return 1
