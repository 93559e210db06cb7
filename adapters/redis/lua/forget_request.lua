-- forget_request: shorten a request claim that reserved nothing.
-- KEYS[1] request claim hash, KEYS[2] order lookup
-- ARGV[1] reservation_id the claim must still be bound to, ARGV[2] ttl ms
-- Only shortens (PEXPIRE ... LT): a claim with less time left keeps it.
-- Returns 1 when the claim was bound to ARGV[1], 0 otherwise (nothing
-- changes).
if redis.call('HGET', KEYS[1], 'reservation_id') ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2], 'LT')
redis.call('PEXPIRE', KEYS[2], ARGV[2], 'LT')
return 1
