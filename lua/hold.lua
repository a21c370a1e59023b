-- hold.lua: hold a notice behind its busy entity (store/entity/held.rs):
-- on a route with an inbox, a notice whose entity has a change pending
-- (or notices already waiting) is kept as a queued inbox delivery and put
-- at the back of the entity's queue, in one step with its owed-set entry.
--
-- KEYS[1]  the record key (free: the claim just found it so)
-- KEYS[2]  the entity key
-- KEYS[3]  the scope's owed set for KEYS[1]'s hash slot
-- KEYS[4]  the entity's pending change as the caller believes it (as
--          claim_entity.lua's KEYS[3])
-- ARGV[1]  the encoded inbox record (stage queued)
-- ARGV[2]  its TTL in milliseconds (kept until resolved)
-- ARGV[3]  the key hash (the owed set's member)
-- ARGV[4]  max_held_per_entity
-- ARGV[5]  entity retention in milliseconds
-- ARGV[6]  the announced state
-- ARGV[7]  '1': an entity with no state may take ARGV[6]
-- ARGV[8]  the event it announces, hashed ('' : none)
-- ARGV[9…] the states ARGV[6] may be entered from
--
-- Reply:   'held'    written and queued
--          'free'    nothing to wait for any more: claim it instead
--          { 'moved', pk }  the pending change is not KEYS[4]: nothing
--                    done; retry declaring pk ('' : none)
--          'full'    max_held_per_entity notices wait already
--          'exists'  the key holds a record (a copy raced this one)
--          'itself'  the notice is the entity's pending change (a copy of a
--                    delivery whose outcome is unresolved): never held
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 'exists'
end
local entity = KEYS[2]
local rules = entity_rules()
local busy = rules.blocker(entity, KEYS[4])
if not busy then
  return 'free'
end
if busy[2] == 'moved' then
  return { 'moved', busy[3] }
end
if redis.call('HGET', entity, 'pk') == KEYS[1] then
  return 'itself'
end
local held = rules.held(entity)
if #held >= tonumber(ARGV[4]) then
  return 'full'
end
local sources = {}
for i = 9, #ARGV do
  sources[#sources + 1] = ARGV[i]
end
held[#held + 1] = {
  line = KEYS[1] .. '\t' .. ARGV[6] .. '\t' .. ARGV[7] .. '\t' .. table.concat(sources, '|') .. '\t' .. ARGV[8],
}
rules.store_held(entity, held)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('PEXPIRE', entity, ARGV[5])
return 'held'
