-- claim.lua: claim an idempotency key, or report who holds it.
--
-- KEYS[1]  the record key: {key_prefix}:{route}:{sha256 hex}
-- ARGV[1]  the encoded in-flight record (see src/record.rs)
-- ARGV[2]  claim TTL in milliseconds (lease + unknown_hold)
--
-- Reply:   nil                     the key was free and is now claimed
--          { record }              the key holds a completed record (replay it;
--                                  its TTL does not matter, so it is not read)
--          { record, pttl_ms }     the key is in flight or unknown: its record and
--                                  remaining TTL (an in-flight record whose TTL is
--                                  at most unknown_hold has lost its owner)
--
-- One round trip for every outcome: a duplicate learns the stored answer
-- without a second GET. Byte 2 of a record is its state; "\2" is completed.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return nil
end
local existing = redis.call('GET', KEYS[1])
if string.sub(existing, 2, 2) == '\2' then
  return { existing }
end
return { existing, redis.call('PTTL', KEYS[1]) }
