-- reserve: take one unit of stock for a user and store the reservation.
-- KEYS[1] reservation hash, KEYS[2] rules, KEYS[3] holders, KEYS[4] stock,
-- KEYS[5] pending, KEYS[6] unresolved, KEYS[7] pending_created
-- ARGV[1] user_id, ARGV[2] created_at ms, ARGV[3] first attempt ms,
-- ARGV[4] reservation_id, ARGV[5..] field/value pairs of the reservation hash
-- Returns {'EXISTS', HGETALL} when the reservation is stored already (nothing
-- changes), {'CLOSED'} outside the activity window or for an unknown
-- activity, {'PAUSED'} while the activity SKU is frozen for verification
-- (guard.lua, rebuild.lua), {'HOLDER'} when the user holds a unit, {'SOLD_OUT'} without
-- stock, {'CREATED'} after the reservation was stored.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'EXISTS', redis.call('HGETALL', KEYS[1])}
end
local window = redis.call('HMGET', KEYS[2], 'starts_ms', 'ends_ms', 'frozen')
if not window[1] or not window[2] then
  return {'CLOSED'}
end
if window[3] then
  return {'PAUSED'}
end
local now = tonumber(ARGV[2])
if now < tonumber(window[1]) or now >= tonumber(window[2]) then
  return {'CLOSED'}
end
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return {'HOLDER'}
end
local stock = tonumber(redis.call('GET', KEYS[4]) or '0')
if stock <= 0 then
  return {'SOLD_OUT'}
end
redis.call('DECR', KEYS[4])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[5], ARGV[3], ARGV[4])
redis.call('ZADD', KEYS[6], ARGV[2], ARGV[4])
redis.call('ZADD', KEYS[7], ARGV[2], ARGV[4])
return {'CREATED'}
