-- complete.lua: store the outcome of a claimed key, if we still own it or
-- nobody does.
--
-- KEYS[1]  the record key
-- then, each only when its argument below says so, in this order:
--          the scope's owed set for KEYS[1]'s hash slot (a delivery the
--          inbox now owes, queued or held: src/store/inbox.rs, "Owed
--          sets"), which gets ARGV[4] in the same step as the record;
--          the scope's probe due set and plans hash (a route with
--          [route.probe]: probe.lua), which schedule the first probe of an
--          unknown outcome and forget the plan of any other;
--          the entity key (a record of an entity route)
-- ARGV[1]  owner token (16 bytes) written by claim.lua
-- ARGV[2]  the encoded completed, unknown or inbox record (src/record.rs)
-- ARGV[3]  TTL in milliseconds (retention, unknown_hold, or "kept until
--          resolved" for an owed delivery)
-- ARGV[4]  the key hash for the owed set ('' : no owed set)
-- ARGV[5]  what the write means for the entity's pending change ('apply',
--          'drop' or 'keep', entity.lua; '' : not an entity route)
-- ARGV[6]  the probe's jitter in ms ('' or absent: no probe)
--
-- Reply:   1 stored over our own claim
--          2 stored into a free key: our claim expired (or was lost with a
--            restarted, evicted or purged store) while the answer was in
--            hand; the upstream did act, so its outcome must hold the key
--          0 another owner holds the key (nothing written)
local current = redis.call('GET', KEYS[1])
if current and record_owner(current) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
local next_key = 2
if ARGV[4] ~= '' then
  redis.call('SADD', KEYS[next_key], ARGV[4])
  next_key = next_key + 1
end
if ARGV[6] and ARGV[6] ~= '' then
  probe_rules().settle(KEYS[next_key], KEYS[next_key + 1], KEYS[1], record_state(ARGV[2]), ARGV[6])
  next_key = next_key + 2
end
if ARGV[5] and ARGV[5] ~= '' then
  entity_rules().settle(KEYS[next_key], KEYS[1], ARGV[5])
end
if current then
  return 1
end
return 2
