-- guard: check that this Redis process is the verified one; freeze the
-- stock books when it is not (ports.StockBooks).
-- KEYS[1] generation hash, KEYS[2] slots set
-- ARGV[1] run_id of the process serving this connection, ARGV[2] now ms,
-- ARGV[3] key prefix of the namespace ("<ns>:")
-- Returns 'OK' when ARGV[1] is the verified generation, 'PENDING' when its
-- recovery is pending already, 'FROZEN' when this call froze every slot and
-- made ARGV[1] the pending generation. Single-node only: it touches every
-- slot's rules key.
local g = redis.call('HMGET', KEYS[1], 'run_id', 'pending')
if g[1] == ARGV[1] then
  return 'OK'
end
if g[2] == ARGV[1] then
  return 'PENDING'
end
for _, id in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local rules = ARGV[3] .. '{' .. id .. '}:rules'
  if redis.call('EXISTS', rules) == 1 then
    redis.call('HSET', rules, 'frozen', ARGV[1])
  end
end
redis.call('HSET', KEYS[1], 'pending', ARGV[1], 'pending_since_ms', ARGV[2])
return 'FROZEN'
