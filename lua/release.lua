-- release.lua: give up a claim so the sender's next retry is a first delivery.
--
-- KEYS[1]  the record key
-- ARGV[1]  owner token (16 bytes) written by claim.lua
-- ARGV[2]  '1': delete only an in-flight claim (state byte 1), never a
--          record the owner wrote over it (a release still running after
--          the sender's answer: a duplicate may have been acknowledged by
--          that record); anything else: whatever the owner holds
-- ARGV[3]  'drop' for a record of an entity route (entity.lua): a released
--          change never happened, so the entity drops it in the step that
--          deletes its record; '' : not an entity route
-- ARGV[4]  '1' for a route with [route.probe]: the record's probe plan goes
--          with it (probe.lua); absent or '' : no probe
-- KEYS[2], KEYS[3]  with ARGV[4]: the scope's probe due set and plans hash
-- KEYS[#KEYS]       with ARGV[3]: the entity key
--
-- Reply:   1 deleted; 0 the key expired, another owner holds it, or (with
--          ARGV[2] = '1') it no longer holds a claim (nothing deleted)
local current = redis.call('GET', KEYS[1])
if current and record_owner(current) == ARGV[1]
    and (ARGV[2] ~= '1' or record_state(current) == IN_FLIGHT) then
  redis.call('DEL', KEYS[1])
  if ARGV[4] == '1' then
    probe_rules().forget(KEYS[2], KEYS[3], KEYS[1])
  end
  if ARGV[3] and ARGV[3] ~= '' then
    entity_rules().settle(KEYS[#KEYS], KEYS[1], ARGV[3])
  end
  return 1
end
return 0
