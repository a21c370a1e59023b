-- lookup.lua: read a record and its remaining TTL atomically.
--
-- KEYS[1]  the record key
--
-- Reply:   nil                     no record
--          { record, pttl_ms }     the record and its remaining TTL
--
-- Used by the admin API; the request path learns the same from claim.lua.
local existing = redis.call('GET', KEYS[1])
if not existing then
  return nil
end
return { existing, redis.call('PTTL', KEYS[1]) }
