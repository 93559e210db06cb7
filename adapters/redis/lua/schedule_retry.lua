-- schedule_retry: a send whose outcome is unknown; PENDING stays PENDING and
-- is due again at ARGV[3].
-- KEYS[1] reservation hash, KEYS[2] pending
-- ARGV[1] reservation_id, ARGV[2] lease owner of the caller, ARGV[3] next ms
-- The lease is dropped when held by ARGV[2] (or by nobody). When another
-- owner holds a lease, the reservation is not due before that lease ends.
-- A reservation found exactly as this call would leave it (no lease of the
-- caller, next_retry_at and pending score at the computed time) is left
-- unchanged, version included: so a call run again after its reply was
-- lost counts one event.
-- Returns 1 when rescheduled, 0 when not PENDING (no-op), -1 when unknown.
local v = redis.call('HMGET', KEYS[1], 'status', 'lease_owner', 'lease_until')
if not v[1] then
  return -1
end
if v[1] ~= 'PENDING' then
  return 0
end
local nextAt = tonumber(ARGV[3])
local owner = v[2] or ''
local mine = owner == '' or owner == ARGV[2]
if not mine then
  local leaseUntil = tonumber(v[3]) or 0
  if leaseUntil > nextAt then
    nextAt = leaseUntil
  end
end
local at = string.format('%d', nextAt)
if not (owner ~= '' and owner == ARGV[2]) and redis.call('HGET', KEYS[1], 'next_retry_at') == at
    and tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]) or '-1') == nextAt then
  return 1
end
if mine then
  redis.call('HSET', KEYS[1], 'lease_owner', '', 'lease_until', '0')
end
redis.call('HSET', KEYS[1], 'next_retry_at', at)
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('ZADD', KEYS[2], nextAt, ARGV[1])
return 1
