-- mark_sent: PENDING -> SENT after the broker confirmed the message.
-- KEYS[1] reservation hash, KEYS[2] pending, KEYS[3] pending_created
-- ARGV[1] reservation_id
-- Returns 1 when changed, 0 when the status was not PENDING (no-op), -1 when
-- the reservation is unknown.
local status = redis.call('HGET', KEYS[1], 'status')
if not status then
  return -1
end
if status ~= 'PENDING' then
  return 0
end
redis.call('HSET', KEYS[1], 'status', 'SENT', 'lease_owner', '', 'lease_until', '0')
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
return 1
