-- mark_ordered: PENDING or SENT -> ORDERED for a batch of one activity SKU,
-- adopting orders whose reservation Redis lost (ports.StockBooks).
-- KEYS[1] pending, KEYS[2] unresolved, KEYS[3] pending_created, KEYS[4]
-- rules, KEYS[5] stock, KEYS[6] holders, KEYS[7..] reservation hashes
-- ARGV[1] activity_id, ARGV[2] sku_id, ARGV[2i+1], ARGV[2i+2]:
-- reservation_id and user_id ("0" when unknown) of KEYS[i + 6], the last
-- ARGV the retention ms (> 0: an ORDERED hash expires that long after it
-- became ORDERED)
-- ORDERED and RELEASED reservations are skipped. An unknown reservation is
-- skipped too, unless its user is known and the slot's books were rebuilt
-- (rebuild.lua) and the user's holder is not this reservation already:
-- then the order is adopted: the reservation is stored as ORDERED, its user
-- becomes the holder and its unit is taken from the counter (or counted in
-- the rules' overdraft when the counter is 0). Returns the number changed.
local changed = 0
local rebuilt = nil
local retention = tonumber(ARGV[#ARGV])
for i = 7, #KEYS do
  local id, user = ARGV[2 * (i - 6) + 1], ARGV[2 * (i - 6) + 2]
  local status = redis.call('HGET', KEYS[i], 'status')
  if status == 'PENDING' or status == 'SENT' then
    redis.call('HSET', KEYS[i], 'status', 'ORDERED', 'lease_owner', '', 'lease_until', '0')
    redis.call('HINCRBY', KEYS[i], 'version', 1)
    if retention > 0 then
      redis.call('PEXPIRE', KEYS[i], retention)
    end
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    redis.call('ZREM', KEYS[3], id)
    changed = changed + 1
  elseif not status and user ~= '0' then
    if rebuilt == nil then
      rebuilt = redis.call('HEXISTS', KEYS[4], 'rebuilt_generation') == 1
    end
    if rebuilt and redis.call('HGET', KEYS[6], user) ~= id then
      redis.call('HSET', KEYS[i], 'reservation_id', id, 'activity_id', ARGV[1], 'sku_id', ARGV[2],
        'user_id', user, 'status', 'ORDERED', 'adopted', '1', 'version', '1')
      if retention > 0 then
        redis.call('PEXPIRE', KEYS[i], retention)
      end
      redis.call('HSET', KEYS[6], user, id)
      if tonumber(redis.call('GET', KEYS[5]) or '0') > 0 then
        redis.call('DECR', KEYS[5])
      else
        redis.call('HINCRBY', KEYS[4], 'overdraft', 1)
      end
      changed = changed + 1
    end
  end
end
return changed
