-- mark_ordered: PENDING or SENT -> ORDERED for a batch of one activity SKU.
-- KEYS[1] pending, KEYS[2] unresolved, KEYS[3] pending_created,
-- KEYS[4..] reservation hashes
-- ARGV[i] reservation_id of KEYS[i + 3]
-- Unknown, ORDERED and RELEASED reservations are skipped. Returns the number
-- changed.
local changed = 0
for i = 4, #KEYS do
  local id = ARGV[i - 3]
  local status = redis.call('HGET', KEYS[i], 'status')
  if status == 'PENDING' or status == 'SENT' then
    redis.call('HSET', KEYS[i], 'status', 'ORDERED', 'lease_owner', '', 'lease_until', '0')
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    changed = changed + 1
  end
end
return changed
