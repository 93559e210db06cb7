-- claim_due: lease due PENDING reservations of one activity SKU.
-- KEYS[1] pending, KEYS[2] pending_created, KEYS[3..] reservation hashes
-- (candidates read from pending just before)
-- ARGV[1] now ms, ARGV[2] lease_until ms, ARGV[3] owner,
-- ARGV[i + 1] reservation_id of KEYS[i] for i >= 3
-- A candidate is claimed when it is still in pending with a score <= now,
-- its status is PENDING and no lease is active: lease_owner, lease_until and
-- send_attempt + 1 are set, and its pending score moves to lease_until so
-- nobody else claims it before the lease ends. Index entries of reservations
-- that are gone or no longer PENDING are removed. A candidate already leased
-- to ARGV[3] until exactly ARGV[2] (with ARGV[2] > now) is returned again
-- unchanged: that is this call run again after its reply was lost. Returns
-- the HGETALL of each claimed reservation.
local now = tonumber(ARGV[1])
local out = {}
for i = 3, #KEYS do
  local id = ARGV[i + 1]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score and score == ARGV[2] and tonumber(ARGV[2]) > now then
    local v = redis.call('HMGET', KEYS[i], 'status', 'lease_owner', 'lease_until')
    if v[1] == 'PENDING' and v[2] == ARGV[3] and v[3] == ARGV[2] then
      out[#out + 1] = redis.call('HGETALL', KEYS[i])
    end
  elseif score and tonumber(score) <= now then
    local v = redis.call('HMGET', KEYS[i], 'status', 'lease_until')
    if v[1] ~= 'PENDING' then
      redis.call('ZREM', KEYS[1], id)
      redis.call('ZREM', KEYS[2], id)
    elseif (tonumber(v[2]) or 0) > now then
      redis.call('ZADD', KEYS[1], v[2], id)
    else
      redis.call('HSET', KEYS[i], 'lease_owner', ARGV[3], 'lease_until', ARGV[2])
      redis.call('HINCRBY', KEYS[i], 'send_attempt', 1)
      redis.call('ZADD', KEYS[1], ARGV[2], id)
      out[#out + 1] = redis.call('HGETALL', KEYS[i])
    end
  end
end
return out
