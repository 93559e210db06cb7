-- switch: change what reserve.lua checks for one lane of an activity SKU
-- (ports.ActivitySwitch): the operator's pause or the end of the sale.
-- KEYS[1] rules
-- ARGV[1] 'paused' or 'ends_ms', ARGV[2] the value: '1' or '0' for
-- paused, the end in ms for ends_ms
-- Returns 1 when this call changed the rules, 0 when they held the value
-- already, -1 when the lane has no rules (not seeded, or lost: nothing is
-- written, so a rebuild or a seed still finds it absent).
if redis.call('EXISTS', KEYS[1]) == 0 then
  return -1
end
if ARGV[1] == 'paused' then
  if ARGV[2] == '1' then
    return redis.call('HSET', KEYS[1], 'paused', '1')
  end
  return redis.call('HDEL', KEYS[1], 'paused')
end
if redis.call('HGET', KEYS[1], 'ends_ms') == ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[1], 'ends_ms', ARGV[2])
return 1
