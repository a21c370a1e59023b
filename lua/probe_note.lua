-- probe_note.lua: the instance that took a probe notes an attempt that
-- could not tell: the plan as it now stands and when to look again.
--
-- KEYS[1]  the record key
-- KEYS[2]  the scope's probe due set
-- KEYS[3]  the scope's probe plans hash
-- ARGV[1]  the taker's owner token
-- ARGV[2]  the plan text
-- ARGV[3]  ms from now until the next attempt; '' : none (the attempts
--          are spent: the entry waits until the record expires)
--
-- Reply:   1 noted; 0 the record is no longer the taker's
local current = redis.call('GET', KEYS[1])
if not current or record_owner(current) ~= ARGV[1] then
  return 0
end
redis.call('HSET', KEYS[3], KEYS[1], ARGV[2])
local after = tonumber(ARGV[3])
if not after then
  local pttl = redis.call('PTTL', KEYS[1])
  after = math.max(pttl, 0) + 1000
end
redis.call('ZADD', KEYS[2], probe_rules().now() + after, KEYS[1])
return 1
