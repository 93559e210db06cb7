-- release_many: give the units of a batch of reservations of one activity
-- SKU back, each at most once (I4), with the guard and effects of
-- release.lua, in input order.
-- KEYS[1] stock, KEYS[2] holders, KEYS[3] pending, KEYS[4] unresolved,
-- KEYS[5] pending_created, KEYS[6..] reservation hashes
-- ARGV[1] call token (new per call), ARGV[2i] reservation_id of
-- KEYS[i + 5], ARGV[2i + 1] its release reason, the last ARGV the
-- retention ms (> 0: a released hash expires that long after the release)
-- Entry i stores release_call = <token>#<i>. Returns one integer per
-- reservation hash: 1 when this call released it (also when it runs again
-- after its reply was lost), 0 when it was RELEASED already (also by an
-- earlier entry of this call), -1 when the reservation is unknown.
local out = {}
local retention = tonumber(ARGV[#ARGV])
for i = 6, #KEYS do
  local id = ARGV[2 * (i - 5)]
  local reason = ARGV[2 * (i - 5) + 1]
  local call = ARGV[1] .. '#' .. (i - 5)
  local v = redis.call('HMGET', KEYS[i], 'status', 'user_id', 'release_call')
  if not v[1] then
    out[#out + 1] = -1
  elseif v[1] == 'RELEASED' then
    if v[3] == call then
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  else
    redis.call('INCR', KEYS[1])
    if v[2] and redis.call('HGET', KEYS[2], v[2]) == id then
      redis.call('HDEL', KEYS[2], v[2])
    end
    redis.call('HSET', KEYS[i], 'status', 'RELEASED', 'release_reason', reason,
      'lease_owner', '', 'lease_until', '0', 'release_call', call)
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    if retention > 0 then
      redis.call('PEXPIRE', KEYS[i], retention)
    end
    redis.call('ZREM', KEYS[3], id)
    redis.call('ZREM', KEYS[4], id)
    redis.call('ZREM', KEYS[5], id)
    out[#out + 1] = 1
  end
end
return out
