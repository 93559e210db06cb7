-- transfer_out: give up to ARGV[3] units of this lane's stock to another
-- lane of the same activity SKU (docs/capacity.md "Stock lanes"). The
-- units leave the counter and are logged as in transit until the
-- receiving lane took them (transfer_in.lua) and transfer_done.lua
-- removed the entry; a rebuild of the activity SKU drops the log.
-- KEYS[1] rules, KEYS[2] stock, KEYS[3] transfers log (hash)
-- ARGV[1] transfer id (new per transfer), ARGV[2] receiving lane,
-- ARGV[3] units wanted, ARGV[4] now ms
-- The log entry is "<lane>:<units>:<ms>:<epoch>".
-- Returns {units given, books epoch}: the stored entry when the transfer
-- is logged already (this call run again after its reply was lost),
-- {0, epoch} when the counter is empty, {-1, ''} when the lane is frozen
-- or not seeded. The epoch is the rules' epoch ('' until a rebuild).
local logged = redis.call('HGET', KEYS[3], ARGV[1])
if logged then
  local n, e = string.match(logged, '^%d+:(%d+):%d+:(.*)$')
  return {tonumber(n), e}
end
local r = redis.call('HMGET', KEYS[1], 'starts_ms', 'frozen', 'epoch')
if not r[1] or r[2] then
  return {-1, ''}
end
local epoch = r[3] or ''
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local take = math.min(stock, tonumber(ARGV[3]))
if take <= 0 then
  return {0, epoch}
end
redis.call('DECRBY', KEYS[2], take)
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2] .. ':' .. take .. ':' .. ARGV[4] .. ':' .. epoch)
redis.call('HINCRBY', KEYS[1], 'moves', 1)
return {take, epoch}
