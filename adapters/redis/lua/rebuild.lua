-- rebuild: rewrite one activity SKU's stock books from PostgreSQL's facts
-- and unfreeze it, atomically (ports.StockBooks, ports.StockRebuild).
-- KEYS[1] rules, KEYS[2] stock, KEYS[3] holders, KEYS[4] pending,
-- KEYS[5] unresolved, KEYS[6] pending_created, KEYS[7..] reservation
-- hashes: the in-flight ids, then the ordered ids, then the released ids
-- ARGV[1] generation, ARGV[2] now ms, ARGV[3] base (initial stock minus
-- PostgreSQL's non-canceled orders), ARGV[4] in-flight count, ARGV[5]
-- ordered count, ARGV[6] released count, ARGV[7..11] initial, starts_ms,
-- ends_ms, reservation_ttl_ms, payment_timeout_ms (seed the rules when
-- lost), ARGV[12] call token (new per call), ARGV[13] mode: 'open'
-- unfreezes the slot, 'keep' leaves it frozen by ARGV[1] (one lane of
-- several: open_lane.lua opens them once every lane is rebuilt),
-- ARGV[14] the number of lanes, ARGV[15] this lane, ARGV[16] '1' when an
-- operator paused the sale (Activity.Paused), ARGV[17..] the ids of
-- KEYS[7..] in the same order, then user_id/reservation_id pairs of
-- PostgreSQL's holders of this lane
-- The switch of the sale is PostgreSQL's: ends_ms becomes ARGV[9] and the
-- 'paused' field ARGV[16] also when the rules were kept (a Redis restored
-- from an older copy may hold an older switch; switch.lua).
-- The rules' epoch becomes ARGV[1]: stock transfers between lanes logged
-- before the rebuild are dropped (transfer_in.lua).
-- Returns {available, in flight, overdraft}, or {'STALE'} (nothing written)
-- when the rules exist and are not frozen by ARGV[1]: another recovery
-- rebuilt the slot already (it may be selling again), or a newer generation
-- froze it. The rules keep the call token and the result (rebuilt_call,
-- rebuilt_result), so a call run again after its reply was lost returns
-- its result again instead of STALE.
if redis.call('EXISTS', KEYS[1]) == 1 then
  local r = redis.call('HMGET', KEYS[1], 'frozen', 'rebuilt_generation', 'rebuilt_call', 'rebuilt_result')
  if r[1] ~= ARGV[1] then
    if not r[1] and r[2] == ARGV[1] and r[3] == ARGV[12] and r[4] then
      local a, h, o = string.match(r[4], '^(%d+):(%d+):(%d+)$')
      return {tonumber(a), tonumber(h), tonumber(o)}
    end
    return {'STALE'}
  end
else
  redis.call('HSET', KEYS[1], 'initial', ARGV[7], 'starts_ms', ARGV[8], 'ends_ms', ARGV[9],
    'reservation_ttl_ms', ARGV[10], 'payment_timeout_ms', ARGV[11], 'lanes', ARGV[14], 'lane', ARGV[15])
end
redis.call('HSET', KEYS[1], 'ends_ms', ARGV[9])
if ARGV[16] == '1' then
  redis.call('HSET', KEYS[1], 'paused', '1')
else
  redis.call('HDEL', KEYS[1], 'paused')
end
local nIn, nOrd, nRel = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local function drop(id)
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZREM', KEYS[5], id)
  redis.call('ZREM', KEYS[6], id)
end
redis.call('DEL', KEYS[3])
local held = 0
for i = 1, nIn do
  local key, id = KEYS[6 + i], ARGV[16 + i]
  local v = redis.call('HMGET', key, 'status', 'user_id')
  if v[1] and v[1] ~= 'RELEASED' then
    held = held + 1
    redis.call('HSET', KEYS[3], v[2], id)
  end
end
for i = nIn + 1, nIn + nOrd do
  local key, id = KEYS[6 + i], ARGV[16 + i]
  local status = redis.call('HGET', key, 'status')
  if status == 'PENDING' or status == 'SENT' then
    redis.call('HSET', key, 'status', 'ORDERED', 'lease_owner', '', 'lease_until', '0')
    redis.call('HINCRBY', key, 'version', 1)
    drop(id)
  end
end
for i = nIn + nOrd + 1, nIn + nOrd + nRel do
  local key, id = KEYS[6 + i], ARGV[16 + i]
  local status = redis.call('HGET', key, 'status')
  if status and status ~= 'RELEASED' then
    redis.call('HSET', key, 'status', 'RELEASED', 'release_reason', 'BOOKS_REBUILT',
      'lease_owner', '', 'lease_until', '0')
    redis.call('HINCRBY', key, 'version', 1)
    drop(id)
  end
end
local first = 17 + nIn + nOrd + nRel
for i = first, #ARGV, 2 do
  redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1])
end
local available = tonumber(ARGV[3]) - held
local overdraft = 0
if available < 0 then
  overdraft, available = -available, 0
end
redis.call('SET', KEYS[2], available)
if ARGV[13] == 'open' then
  redis.call('HDEL', KEYS[1], 'frozen')
end
redis.call('HSET', KEYS[1], 'rebuilt_generation', ARGV[1], 'rebuilt_ms', ARGV[2], 'rebuilt_call', ARGV[12],
  'rebuilt_result', available .. ':' .. held .. ':' .. overdraft, 'epoch', ARGV[1])
return {available, held, overdraft}
