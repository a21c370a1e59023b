-- pending.lua: the record key of an entity's pending change, read before
-- claim_entity.lua or hold.lua so that they can declare it (entity.lua,
-- entity_declared).
--
-- KEYS[1]  the entity key
--
-- Reply:   the pending change's record key, or nil when none
return redis.call('HGET', KEYS[1], 'pk')
