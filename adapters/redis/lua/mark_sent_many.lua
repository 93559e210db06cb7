-- mark_sent_many: PENDING -> SENT for a batch of one activity SKU after the
-- broker confirmed their messages.
-- KEYS[1] pending, KEYS[2] pending_created, KEYS[3..] reservation hashes
-- ARGV[i] reservation_id of KEYS[i + 2]
-- Unknown reservations and those past PENDING are skipped. Returns the
-- number changed.
local changed = 0
for i = 3, #KEYS do
  local id = ARGV[i - 2]
  if redis.call('HGET', KEYS[i], 'status') == 'PENDING' then
    redis.call('HSET', KEYS[i], 'status', 'SENT', 'lease_owner', '', 'lease_until', '0')
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    changed = changed + 1
  end
end
return changed
