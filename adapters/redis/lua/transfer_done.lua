-- transfer_done: remove a finished or dropped transfer from the giving
-- lane's log (docs/capacity.md "Stock lanes").
-- KEYS[1] rules, KEYS[2] transfers log
-- ARGV[1] transfer id
-- Returns 1 when the entry was removed, 0 when it was gone already.
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then
  return 0
end
redis.call('HINCRBY', KEYS[1], 'moves', 1)
return 1
