-- stock_change: apply one lane's part of a stock change (ports.StockChanger)
-- at most once per request id in the lane's books epoch.
-- KEYS[1] rules, KEYS[2] stock, KEYS[3] applied changes hash
-- (request id -> '<epoch>:<units>')
-- ARGV[1] request id, ARGV[2] op: 'add' (ARGV[3] units more), 'take'
-- (remove ARGV[3] units, all or none), 'upto' (remove up to ARGV[3]
-- units, what the lane has), 'undo' (give back what this request took in
-- the current epoch and forget it)
-- The epoch is the rules' 'epoch' (a rebuild from PostgreSQL sets it;
-- '' before any): a change recorded in an older epoch was applied to books
-- the rebuild replaced, so it counts as not applied here.
-- Returns {'UNKNOWN'} when the lane is not seeded, {'PAUSED'} while it is
-- frozen for verification (nothing changes), {'SHORT', stock} when 'take'
-- finds fewer units (nothing changes), else {status, units, stock} with
-- status 'APPLIED' (this call changed the counter by units), 'DONE' (the
-- request was applied before in this epoch with units; nothing changes)
-- or 'UNDONE' (units given back, 0 when nothing was held).
local r = redis.call('HMGET', KEYS[1], 'starts_ms', 'frozen', 'epoch')
if not r[1] then
  return {'UNKNOWN'}
end
if r[2] then
  return {'PAUSED'}
end
local epoch = r[3] or ''
local op, want = ARGV[2], tonumber(ARGV[3])
local stock = tonumber(redis.call('GET', KEYS[2]) or '0')
local seen = redis.call('HGET', KEYS[3], ARGV[1])
local units
if seen then
  local e, u = string.match(seen, '^(.*):(%d+)$')
  if e == epoch then
    units = tonumber(u)
  end
end
if op == 'undo' then
  if not units then
    return {'UNDONE', 0, stock}
  end
  redis.call('HDEL', KEYS[3], ARGV[1])
  return {'UNDONE', units, redis.call('INCRBY', KEYS[2], units)}
end
if units then
  return {'DONE', units, stock}
end
if op == 'add' then
  stock = redis.call('INCRBY', KEYS[2], want)
  units = want
elseif op == 'take' then
  if stock < want then
    return {'SHORT', stock}
  end
  stock = redis.call('DECRBY', KEYS[2], want)
  units = want
else
  units = math.min(math.max(stock, 0), want)
  stock = redis.call('DECRBY', KEYS[2], units)
end
redis.call('HSET', KEYS[3], ARGV[1], epoch .. ':' .. units)
return {'APPLIED', units, stock}
