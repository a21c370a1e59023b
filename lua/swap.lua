-- swap.lua: replace an inbox record if its owner is the one the writer read.
--
-- KEYS[1]  the record key
-- KEYS[2]  the scope's owed set for KEYS[1]'s hash slot (src/store/inbox.rs,
--          "Owed sets"): kept in step with the record
-- ARGV[1]  the owner token (16 bytes) the writer expects to find
-- ARGV[2]  the new encoded record (see src/record.rs; its own owner token
--          is the writer's)
-- ARGV[3]  TTL in milliseconds
-- ARGV[4]  the key hash (the owed set's member)
-- ARGV[5]  '1': the new record is a delivery still owed (added to KEYS[2]);
--          '0': resolved, delivered or dropped (taken out of KEYS[2])
-- KEYS[3], ARGV[6]  only for a record of an entity route: the entity key
--          and what the write means for its pending change ('apply',
--          'drop' or 'keep', entity.lua)
-- ARGV[7]  'take': a worker claims a queued delivery of an entity route
--          to send it; the entity decides first (entity_take in
--          entity.lua) and the record is written only if it may go
--
-- Reply:   1 the key now holds ARGV[2]: written over the expected owner, or
--            already there (a retried swap whose first reply was lost; a
--            whole-record match is proof it was this writer's)
--          0 the key is free, or someone else wrote it (nothing written)
--          with ARGV[7] = 'take': { 0, 'wait' } (not its turn) or
--          { 0, 'repeat', to } / { 0, 'refused', from, to } (its turn
--          came and the entity decided: nothing written)
--
-- How redelivery workers claim a queued delivery and settle it: every
-- write puts a fresh owner token in the record (record.lua, record_owner),
-- so two workers that read the same record can not both win.
local current = redis.call('GET', KEYS[1])
if not current then
  return 0
end
if record_owner(current) == ARGV[1] then
  if ARGV[7] == 'take' then
    local verdict = entity_rules().take(KEYS[3], KEYS[1])
    if verdict then
      return verdict
    end
  end
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  if ARGV[5] == '1' then
    redis.call('SADD', KEYS[2], ARGV[4])
  else
    redis.call('SREM', KEYS[2], ARGV[4])
  end
  if ARGV[6] then
    entity_rules().settle(KEYS[3], KEYS[1], ARGV[6])
  end
  return 1
end
if current == ARGV[2] then
  return 1
end
return 0
