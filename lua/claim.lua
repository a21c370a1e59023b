-- claim.lua: claim an idempotency key (SET NX PX), or report who holds it.
--
-- KEYS[1]  the record key: {key_prefix}:{route}:{sha256 hex}
-- ARGV[1]  the encoded in-flight record (see src/record.rs)
-- ARGV[2]  claim TTL in milliseconds (lease + unknown_hold)
-- KEYS[2], KEYS[3], ARGV[3], ARGV[4]  only on a route with [route.probe]:
--          the scope's probe due set and plans hash (the record's slot),
--          the delivery's probe plan and ms until a lost owner's record
--          could first be probed (lease + start_after); a claim keeps the
--          plan in the same step (probe.lua)
--
-- Reply:   nil                     the key was free and is now claimed
--          { record }              the key holds a completed record (replay it;
--                                  its TTL does not matter, so it is not read)
--          { record, pttl_ms }     the key is in flight or unknown: its record and
--                                  remaining TTL (an in-flight record whose TTL is
--                                  at most unknown_hold has lost its owner)
--
-- Reads before it writes: a Redis at maxmemory under noeviction refuses the
-- SET with an OOM error, and a duplicate of a key it already holds must
-- still be replayed then. Only a free key is written, so a full store fails
-- new claims alone. One round trip for every outcome: a duplicate learns
-- the stored answer without a second GET. Byte 2 of a record is its state;
-- "\2" (completed), "\4" (completed, answer not stored) and "\5" (in the
-- inbox: its ack is replayed) need no TTL. The write says NX although the
-- read just found the key free: it states the intent (a claim never
-- overwrites) and would stop a write over a record should the read ever
-- be wrong, at no cost.
local existing = redis.call('GET', KEYS[1])
if not existing then
  redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  if ARGV[3] then
    probe_rules().arm(KEYS[2], KEYS[3], KEYS[1], ARGV[3], ARGV[4])
  end
  return nil
end
if record_answers(existing) then
  return { existing }
end
return { existing, redis.call('PTTL', KEYS[1]) }
