-- guard_node: record a cluster master's new Redis process as pending once
-- its activity SKUs are frozen (guard_sku.lua; clusterguard.go).
-- KEYS[1] the master's generation hash (<ns>:node:{<tag of its first hash
-- slot>}, fields as <ns>:generation: run_id verified, pending)
-- ARGV[1] run_id of the process, ARGV[2] now ms
-- Returns 'OK' when ARGV[1] is the verified generation, 'PENDING' when its
-- recovery is pending already, 'FROZEN' when this call made it pending.
local g = redis.call('HMGET', KEYS[1], 'run_id', 'pending')
if g[1] == ARGV[1] then
  return 'OK'
end
if g[2] == ARGV[1] then
  return 'PENDING'
end
redis.call('HSET', KEYS[1], 'pending', ARGV[1], 'pending_since_ms', ARGV[2])
return 'FROZEN'
