-- entity_set.lua: an operator sets or clears an entity's state
-- (src/store/entity/operator.rs), only if it still is as the operator saw
-- it. The pending change is resolved (dropped from the entity; a later
-- write of its record no longer touches it); held notices stay queued.
--
-- KEYS[1]  the entity key
-- ARGV[1]  the state the operator saw ('' : none)
-- ARGV[2]  the pending delivery the operator saw (its key hash with the
--          entity tag; '' : none)
-- ARGV[3]  'set' or 'clear'
-- ARGV[4]  the new state (for 'set')
-- ARGV[5]  who: the operator, remembered in the history (no ':')
-- ARGV[6]  entity retention in milliseconds
--
-- Reply:   1 done; 0 the entity changed since (nothing written)
local fields = redis.call('HMGET', KEYS[1], 's', 'pk', 'pt', 'pe')
local state = fields[1] or ''
local pending = ''
if fields[2] then
  pending = string.match(fields[2], '[^:]*$')
end
if state ~= ARGV[1] or pending ~= ARGV[2] then
  return 0
end
local rules = entity_rules()
local now = rules.now()
local from = fields[1] or nil
if ARGV[3] == 'set' then
  local history = rules.history(KEYS[1], 's', from, ARGV[4], ARGV[5], now)
  -- Set to the pending change's own state: that change was made, its
  -- event is the entity's (a copy of it is then a repeat).
  local event = ''
  if fields[2] and fields[3] == ARGV[4] and fields[4] then
    event = fields[4]
  end
  local events = rules.events_after(KEYS[1], ARGV[4], event)
  redis.call('HSET', KEYS[1], 's', ARGV[4], 'at', now, 'h', history)
  if events then
    redis.call('HSET', KEYS[1], 'e', events)
  else
    redis.call('HDEL', KEYS[1], 'e')
  end
else
  local history = rules.history(KEYS[1], 'c', from, '', ARGV[5], now)
  redis.call('HSET', KEYS[1], 'h', history)
  redis.call('HDEL', KEYS[1], 's', 'at')
end
redis.call('HDEL', KEYS[1], 'pk', 'pf', 'pt', 'pe')
if ARGV[3] ~= 'set' then
  redis.call('HDEL', KEYS[1], 'e')
end
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return 1
