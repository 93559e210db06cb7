-- finish_recovery: mark a generation verified if it is still the pending
-- one (ports.StockBooks).
-- KEYS[1] generation hash
-- ARGV[1] generation, ARGV[2] now ms, ARGV[3] call token (new per call,
-- stored as verified_call)
-- Returns 1 when this call made ARGV[1] the verified generation (also when
-- it runs again after its reply was lost: verified_call is its token), 0
-- otherwise.
local g = redis.call('HMGET', KEYS[1], 'pending', 'run_id', 'verified_call')
if g[1] ~= ARGV[1] then
  if not g[1] and g[2] == ARGV[1] and g[3] == ARGV[3] then
    return 1
  end
  return 0
end
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'verified_ms', ARGV[2], 'verified_call', ARGV[3])
redis.call('HDEL', KEYS[1], 'pending', 'pending_since_ms')
return 1
