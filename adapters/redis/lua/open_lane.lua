-- open_lane: unfreeze one lane of an activity SKU whose lanes were all
-- rebuilt (rebuild.lua in keep mode) for the generation, the second step
-- of a rebuild of several lanes (docs/capacity.md "Stock lanes").
-- KEYS[1] rules
-- ARGV[1] generation
-- Returns 1 when the lane is open for the generation's books after the
-- call (also when it was opened already), 0 when it is frozen by another
-- generation or was not rebuilt for this one.
local r = redis.call('HMGET', KEYS[1], 'frozen', 'rebuilt_generation')
if r[2] ~= ARGV[1] then
  return 0
end
if not r[1] then
  return 1
end
if r[1] ~= ARGV[1] then
  return 0
end
redis.call('HDEL', KEYS[1], 'frozen')
return 1
