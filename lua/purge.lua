-- purge.lua: an operator deletes a record whoever owns it (the admin
-- API's purge: an unknown outcome it has resolved).
--
-- KEYS[1]  the record key
-- ARGV[1]  'drop' for a record of an entity route (entity.lua): if the
--          record is the entity's pending change, the change is dropped in
--          the same step: the operator says it never happened. That holds
--          even when the record is already gone (an unknown outcome whose
--          hold ran out leaves its entity held, unresolved, until an
--          operator says so). '' : not an entity route
-- ARGV[2]  '1' for a route with [route.probe]: its probe plan goes too
-- KEYS[2], KEYS[3]  with ARGV[2]: the scope's probe due set and plans hash
-- KEYS[#KEYS]       with ARGV[1]: the entity key
--
-- Reply:   1 a record was deleted or a pending change dropped; 0 neither
local deleted = redis.call('DEL', KEYS[1])
if ARGV[2] == '1' then
  probe_forget(KEYS[2], KEYS[3], KEYS[1])
end
if ARGV[1] and ARGV[1] ~= '' and redis.call('HGET', KEYS[#KEYS], 'pk') == KEYS[1] then
  entity_settle(KEYS[#KEYS], KEYS[1], ARGV[1])
  return 1
end
return deleted
