-- seed: create an activity SKU's rules and stock counter if absent.
-- KEYS[1] rules hash, KEYS[2] stock counter
-- ARGV[1] initial stock, ARGV[2] starts_ms, ARGV[3] ends_ms,
-- ARGV[4] reservation_ttl_ms, ARGV[5] payment_timeout_ms, ARGV[6] the
-- number of lanes of the activity SKU, ARGV[7] this lane (ARGV[1] is this
-- lane's share of the stock), ARGV[8] '1' when an operator paused the sale
-- (Activity.Paused: the rules' 'paused' field, which reserve.lua checks)
-- Returns 1 when this call created the activity, 0 when it existed with
-- the same number of lanes, -1 when it existed with another (nothing
-- changes). Never resets an existing stock counter.
if redis.call('EXISTS', KEYS[1]) == 1 then
  if (redis.call('HGET', KEYS[1], 'lanes') or '1') ~= ARGV[6] then
    return -1
  end
  return 0
end
redis.call('HSET', KEYS[1],
  'initial', ARGV[1], 'starts_ms', ARGV[2], 'ends_ms', ARGV[3],
  'reservation_ttl_ms', ARGV[4], 'payment_timeout_ms', ARGV[5], 'lanes', ARGV[6], 'lane', ARGV[7])
if ARGV[8] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
end
redis.call('SET', KEYS[2], ARGV[1], 'NX')
return 1
