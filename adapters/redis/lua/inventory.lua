-- inventory: the stock counter and holders of one activity SKU, read
-- atomically.
-- KEYS[1] rules, KEYS[2] stock, KEYS[3] holders
-- Returns {} when the activity SKU is not seeded, else {stock, HVALS holders}.
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {}
end
return {redis.call('GET', KEYS[2]) or '0', redis.call('HVALS', KEYS[3])}
