-- finish_recovery: mark a generation verified if it is still the pending
-- one (ports.StockBooks).
-- KEYS[1] generation hash
-- ARGV[1] generation, ARGV[2] now ms
-- Returns 1 when ARGV[1] became the verified generation, 0 otherwise.
if redis.call('HGET', KEYS[1], 'pending') ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[1], 'run_id', ARGV[1], 'verified_ms', ARGV[2])
redis.call('HDEL', KEYS[1], 'pending', 'pending_since_ms')
return 1
