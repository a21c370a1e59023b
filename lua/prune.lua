-- prune.lua: take a key out of its scope's owed set once its record is
-- gone, or is still the very record the caller read and found not owed.
--
-- KEYS[1]  the record key
-- KEYS[2]  the scope's owed set for KEYS[1]'s hash slot (src/store/inbox.rs,
--          "Owed sets")
-- ARGV[1]  the key hash (the owed set's member)
-- ARGV[2]  the owner token (16 bytes) of the record the caller read, or
--          the empty string if it found none
--
-- Reply:   1 taken out; 0 left (not a member, or the record changed since
--          it was read: a new claim may be queueing it right now)
--
-- Every write of a record puts a fresh owner token in it (record.lua,
-- record_owner), so an unchanged owner means an unchanged record.
local current = redis.call('GET', KEYS[1])
if current and record_owner(current) ~= ARGV[2] then
  return 0
end
return redis.call('SREM', KEYS[2], ARGV[1])
