-- inventory: the stock counter, holders and transfers in transit of one
-- lane of an activity SKU (the SKU's only one unless it has lanes), read
-- atomically.
-- KEYS[1] rules, KEYS[2] stock, KEYS[3] holders, KEYS[4] transfers log
-- Returns {} when the lane is not seeded, else {stock, HVALS holders,
-- moves, {transfer id, log entry, ...}}: moves counts the
-- transfer steps the lane took part in (a reader of several lanes reads
-- them again to see that no unit moved while it read); the transfers are
-- those logged in the lane's current books epoch (older ones were
-- counted by a rebuild and are dropped).
local r = redis.call('HMGET', KEYS[1], 'starts_ms', 'moves', 'epoch')
if not r[1] then
  return {}
end
local epoch = r[3] or ''
local transit = {}
local log = redis.call('HGETALL', KEYS[4])
for i = 1, #log, 2 do
  if string.match(log[i + 1], '^%d+:%d+:%d+:(.*)$') == epoch then
    transit[#transit + 1] = log[i]
    transit[#transit + 1] = log[i + 1]
  end
end
return {redis.call('GET', KEYS[2]) or '0', redis.call('HVALS', KEYS[3]), r[2] or '0', transit}
