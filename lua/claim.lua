-- claim.lua: claim an idempotency key, or report who holds it.
--
-- KEYS[1]  the record key: {key_prefix}:{route}:{sha256 hex}
-- ARGV[1]  the encoded in-flight record (see src/record.rs)
-- ARGV[2]  claim TTL in milliseconds (lease + unknown_hold)
--
-- Reply:   nil                     the key was free and is now claimed
--          { record, pttl_ms }     the key is taken; its record and remaining TTL
--
-- One round trip for both outcomes: a duplicate learns the stored answer
-- without a second GET.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return nil
end
local existing = redis.call('GET', KEYS[1])
return { existing, redis.call('PTTL', KEYS[1]) }
