-- claim_entity.lua: claim.lua for a route with [route.entity]: the
-- delivery's record key and its entity are judged and written in one step
-- (entity.lua has the fields; src/store/entity.rs the rules).
--
-- KEYS[1]  the record key: {key_prefix}:{scope}:{sha256 hex}{entity}
-- KEYS[2]  the entity key: {key_prefix}:{scope}:entity:{entity}
-- KEYS[3]  the record key of the entity's pending change as the caller
--          believes it, or KEYS[2] for none (entity_declared)
-- ARGV[1]  the encoded in-flight record
-- ARGV[2]  claim TTL in milliseconds (lease + unknown_hold)
-- ARGV[3]  the announced state
-- ARGV[4]  entity retention in milliseconds
-- ARGV[5]  '1': an entity with no state may take ARGV[3]
-- ARGV[6]  the event it announces, hashed ('' : none)
-- ARGV[7]  on a route with [route.probe], the delivery's probe plan ('' :
--          none), kept with the claim (probe.lua); KEYS[4] and KEYS[5] are
--          then the scope's probe due set and plans hash
-- ARGV[8]  with a plan: ms until a lost owner's record could first be
--          probed (lease + start_after)
-- ARGV[9…] the states ARGV[3] may be entered from
--
-- Reply:   as claim.lua: nil (claimed), { record } or { record, pttl }
--          when the key holds a record (the entity is not looked at: a
--          copy of a delivery is the record's business); otherwise
--          { 0, 'busy', pttl, kind }  another delivery's change is
--                                  pending: kind 'flight' (its record in
--                                  flight), 'unknown', 'inbox' (owed by
--                                  the inbox) or 'unresolved' (its record
--                                  gone, nothing settled the change: the
--                                  entity stays held; pttl -2) or 'queue'
--                                  (no change pending, but held notices
--                                  wait their turn: a new one goes behind)
--          { 0, 'moved', pk }      the pending change is not KEYS[3]:
--                                  nothing done; retry declaring pk (''
--                                  : none)
--          { 0, 'repeat' }         the entity is in ARGV[3] already
--          { 0, 'refused', from }  the machine forbids from -> ARGV[3]
--                                  (from '' : no state yet)
local existing = redis.call('GET', KEYS[1])
if existing then
  if record_answers(existing) then
    return { existing }
  end
  return { existing, redis.call('PTTL', KEYS[1]) }
end
local entity = KEYS[2]
local rules = entity_rules()
local busy = rules.blocker(entity, KEYS[3])
if busy then
  return busy
end
local sources = {}
for i = 9, #ARGV do
  sources[#sources + 1] = ARGV[i]
end
local verdict = rules.judge(entity, KEYS[1], ARGV[3], ARGV[5] == '1', sources, ARGV[6])
redis.call('PEXPIRE', entity, ARGV[4])
if verdict then
  return verdict
end
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if ARGV[7] ~= '' then
  probe_rules().arm(KEYS[4], KEYS[5], KEYS[1], ARGV[7], ARGV[8])
end
return nil
