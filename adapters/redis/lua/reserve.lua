-- reserve: take one unit of stock for a user and store the reservation.
-- KEYS[1] reservation hash, KEYS[2] rules, KEYS[3] holders, KEYS[4] stock,
-- KEYS[5] pending, KEYS[6] unresolved, KEYS[7] pending_created
-- ARGV[1] user_id, ARGV[2] created_at ms, ARGV[3] first attempt ms,
-- ARGV[4] reservation_id, ARGV[5..] field/value pairs of the reservation hash
-- Returns, checked in this order: {'EXISTS', HGETALL} when the reservation
-- is stored already (nothing changes); {'NOT_FOUND'} for an activity SKU
-- without rules (unknown, or lost by a restarted Redis); {'PAUSED'} while
-- the activity SKU is frozen for verification (guard.lua, rebuild.lua);
-- {'ENDED'} at and after ends_ms; {'NOT_STARTED', starts_ms} before
-- starts_ms; {'HALTED'} while an operator paused the sale (the rules'
-- 'paused' field, switch.lua); {'HOLDER', reservation_id, status,
-- order_id} when the user holds a unit (the holder's reservation, read in
-- this slot: its hash shares KEYS[1]'s prefix); {'SOLD_OUT'} without
-- stock; {'CREATED'} after the reservation was stored.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {'EXISTS', redis.call('HGETALL', KEYS[1])}
end
local rules = redis.call('HMGET', KEYS[2], 'starts_ms', 'ends_ms', 'frozen', 'paused')
if not rules[1] or not rules[2] then
  return {'NOT_FOUND'}
end
if rules[3] then
  return {'PAUSED'}
end
local now = tonumber(ARGV[2])
if now >= tonumber(rules[2]) then
  return {'ENDED'}
end
if now < tonumber(rules[1]) then
  return {'NOT_STARTED', rules[1]}
end
if rules[4] == '1' then
  return {'HALTED'}
end
local held = redis.call('HGET', KEYS[3], ARGV[1])
if held then
  local prefix = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[4])
  local h = redis.call('HMGET', prefix .. held, 'status', 'order_id')
  return {'HOLDER', held, h[1] or '', h[2] or ''}
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
