-- purge.lua: an operator deletes a record whoever owns it (the admin
-- API's purge: an unknown outcome it has resolved).
--
-- KEYS[1]  the record key
-- KEYS[2], ARGV[1]  only for a record of an entity route: the entity key
--          and 'drop' (entity.lua). If the record is the entity's pending
--          change, the change is dropped in the same step: the operator
--          says it never happened. That holds even when the record is
--          already gone (an unknown outcome whose hold ran out leaves its
--          entity held, unresolved, until an operator says so).
--
-- Reply:   1 a record was deleted or a pending change dropped; 0 neither
local deleted = redis.call('DEL', KEYS[1])
if ARGV[1] and redis.call('HGET', KEYS[2], 'pk') == KEYS[1] then
  entity_settle(KEYS[2], KEYS[1], ARGV[1])
  return 1
end
return deleted
