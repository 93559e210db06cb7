-- guard_sku: freeze one activity SKU for a new Redis process of a cluster
-- master (ports.StockBooks; the per-master guard, clusterguard.go).
-- KEYS[1] rules of the activity SKU
-- ARGV[1] run_id of the process serving the SKU's hash slot
-- Returns 1 when the SKU is frozen by ARGV[1] after the call, 0 when
-- KEYS[1] is not an activity SKU's rules or was rebuilt for ARGV[1]
-- already (a connection that checked the process late must not freeze
-- again what the recovery of the same process reopened).
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then
  return 0
end
local r = redis.call('HMGET', KEYS[1], 'starts_ms', 'rebuilt_generation')
if not r[1] or r[2] == ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'frozen', ARGV[1])
return 1
