-- transfer_in: add the units of a logged transfer to this lane's stock,
-- exactly once (docs/capacity.md "Stock lanes").
-- KEYS[1] rules, KEYS[2] stock, KEYS[3] received transfer ids (set)
-- ARGV[1] transfer id, ARGV[2] units, ARGV[3] the books epoch the units
-- left the giving lane in
-- Returns 1 when this call added the units, 0 when the transfer was
-- received already, -1 when the lane is frozen or not seeded (try again
-- later), -2 when the lane's books were rebuilt since the units left (the
-- rebuild counted them from PostgreSQL's facts: drop the transfer).
if redis.call('SISMEMBER', KEYS[3], ARGV[1]) == 1 then
  return 0
end
local r = redis.call('HMGET', KEYS[1], 'starts_ms', 'frozen', 'epoch')
if not r[1] or r[2] then
  return -1
end
if (r[3] or '') ~= ARGV[3] then
  return -2
end
redis.call('INCRBY', KEYS[2], ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
redis.call('HINCRBY', KEYS[1], 'moves', 1)
return 1
