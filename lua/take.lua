-- take.lua: hand out due inbox deliveries, each hidden for a while.
--
-- KEYS[1]  a scope's due index: {key_prefix}:{scope}:inbox:due (sorted set,
--          member = key hash, score = unix ms when a worker should look)
-- ARGV[1]  now, unix ms
-- ARGV[2]  most members to hand out
-- ARGV[3]  the score taken members move to: now + visibility_timeout
--
-- Reply:   the taken members, lowest score first
--
-- Taking and pushing back are one step, so two workers never take the
-- same member at once, and a member whose worker vanished is due again
-- when the visibility timeout ends. The record decides what happens next.
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(due) do
  redis.call('ZADD', KEYS[1], ARGV[3], member)
end
return due
