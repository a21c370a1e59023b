-- purge.lua: an operator deletes a record whoever owns it (the admin
-- API's purge: an unknown outcome it has resolved), if it is still the
-- record the operator saw.
--
-- KEYS[1]  the record key
-- ARGV[1]  bytes 2 to 18 (state byte and owner token) of the record the
--          operator saw, or '' when none was seen (a pending change whose
--          record is gone): with them, a record that is no longer that one
--          (completed, queued, unknown, claimed by another owner since) or
--          is gone is left alone, and the reply is -1
-- ARGV[2]  'drop' for a record of an entity route (entity.lua): if the
--          record is the entity's pending change, the change is dropped in
--          the same step: the operator says it never happened. That holds
--          even when the record is already gone and none was seen (an
--          unknown outcome whose hold ran out leaves its entity held,
--          unresolved, until an operator says so). '' : not an entity route
-- ARGV[3]  '1' for a route with [route.probe]: its probe plan goes too
-- KEYS[2], KEYS[3]  with ARGV[3]: the scope's probe due set and plans hash
-- KEYS[#KEYS]       with ARGV[2]: the entity key
--
-- Reply:   1 a record was deleted or a pending change dropped; 0 neither;
--          -1 not the record seen (nothing done)
if ARGV[1] ~= '' then
  local current = redis.call('GET', KEYS[1])
  if not current or record_seen(current) ~= ARGV[1] then
    return -1
  end
end
local deleted = redis.call('DEL', KEYS[1])
if ARGV[3] == '1' then
  probe_rules().forget(KEYS[2], KEYS[3], KEYS[1])
end
if ARGV[2] and ARGV[2] ~= '' and redis.call('HGET', KEYS[#KEYS], 'pk') == KEYS[1] then
  entity_rules().settle(KEYS[#KEYS], KEYS[1], ARGV[2])
  return 1
end
return deleted
