-- freeze_lane: freeze one lane of an activity SKU for a recovery's
-- generation before its facts are read, so that no lane of the SKU sells
-- while its books are rebuilt from them (docs/capacity.md "Stock lanes").
-- KEYS[1] rules
-- ARGV[1] generation
-- Returns 1 when the lane is frozen by ARGV[1] after the call, 0 when it
-- is not seeded (a lost lane: the rebuild seeds it).
if not redis.call('HGET', KEYS[1], 'starts_ms') then
  return 0
end
redis.call('HSET', KEYS[1], 'frozen', ARGV[1])
return 1
