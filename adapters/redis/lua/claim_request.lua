-- claim_request: bind a user's request_id to the ids of its reservation,
-- after taking a token from the user's bucket.
-- KEYS[1] request claim hash, KEYS[2] token bucket, KEYS[3] order lookup
-- ARGV[1] activity_id, ARGV[2] sku_id, ARGV[3] reservation_id,
-- ARGV[4] order_id, ARGV[5] message_id, ARGV[6] ttl ms,
-- ARGV[7] bucket capacity (<= 0: no limit), ARGV[8] refill tokens per ms,
-- ARGV[9] now ms (0: use the server's TIME)
-- Returns {'CREATED'} without a change when the claim is bound to exactly
-- ARGV[1..5] already: the ids are new per call, so that is this very call
-- run again after its reply was lost.
-- Returns {'EXISTING', reservation_id, order_id, message_id} for a claim
-- bound earlier with the same activity and SKU (no token taken),
-- {'REUSED'} for one bound to another activity or SKU, {'LIMITED'} when the
-- bucket is empty, {'CREATED'} after storing the claim and the order lookup.
local cur = redis.call('HMGET', KEYS[1], 'activity_id', 'sku_id', 'reservation_id', 'order_id', 'message_id')
if cur[1] then
  if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
    return {'REUSED'}
  end
  if cur[3] == ARGV[3] and cur[4] == ARGV[4] and cur[5] == ARGV[5] then
    return {'CREATED'}
  end
  return {'EXISTING', cur[3], cur[4], cur[5]}
end
local capacity = tonumber(ARGV[7])
if capacity > 0 then
  local now = tonumber(ARGV[9])
  if now == 0 then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  local rate = tonumber(ARGV[8])
  local b = redis.call('HMGET', KEYS[2], 'tokens', 'ts')
  local tokens = tonumber(b[1]) or capacity
  local ts = tonumber(b[2]) or now
  if now > ts then
    tokens = math.min(capacity, tokens + (now - ts) * rate)
    ts = now
  end
  local limited = tokens < 1
  if not limited then
    tokens = tokens - 1
  end
  redis.call('HSET', KEYS[2], 'tokens', string.format('%.6f', tokens), 'ts', string.format('%d', ts))
  local full = 1000
  if rate > 0 then
    full = full + math.ceil(capacity / rate)
  else
    full = full + 86400000
  end
  redis.call('PEXPIRE', KEYS[2], full)
  if limited then
    return {'LIMITED'}
  end
end
redis.call('HSET', KEYS[1], 'activity_id', ARGV[1], 'sku_id', ARGV[2],
  'reservation_id', ARGV[3], 'order_id', ARGV[4], 'message_id', ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('SET', KEYS[3], ARGV[1] .. ':' .. ARGV[2] .. ':' .. ARGV[3], 'PX', ARGV[6])
return {'CREATED'}
