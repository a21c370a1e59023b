-- complete.lua: store the outcome of a claimed key, if we still own it or
-- nobody does.
--
-- KEYS[1]  the record key
-- KEYS[2]  only for a delivery the inbox now owes (queued or held): the
--          scope's owed set for KEYS[1]'s hash slot (src/store/inbox.rs,
--          "Owed sets"), which gets ARGV[4] in the same step as the record
-- ARGV[1]  owner token (16 bytes) written by claim.lua
-- ARGV[2]  the encoded completed, unknown or inbox record (src/record.rs)
-- ARGV[3]  TTL in milliseconds (retention, unknown_hold, or "kept until
--          resolved" for an owed delivery)
-- ARGV[4]  with KEYS[2]: the key hash ('' : no owed set)
-- ARGV[5]  only for a record of an entity route: what the write means for
--          the entity's pending change ('apply', 'drop' or 'keep',
--          entity.lua); the entity key is then the last of KEYS
--
-- Reply:   1 stored over our own claim
--          2 stored into a free key: our claim expired (or was lost with a
--            restarted, evicted or purged store) while the answer was in
--            hand; the upstream did act, so its outcome must hold the key
--          0 another owner holds the key (nothing written)
--
-- The owner token sits at bytes 3..18 (1-based) of every record version 1.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 3, 18) ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
if ARGV[4] and ARGV[4] ~= '' then
  redis.call('SADD', KEYS[2], ARGV[4])
end
if ARGV[5] then
  entity_settle(KEYS[#KEYS], KEYS[1], ARGV[5])
end
if current then
  return 1
end
return 2
