-- probe_arm.lua: keep a claim's probe plan before its delivery is
-- forwarded, so whichever instance is alive can probe it should the
-- outcome turn unknown, even if this one dies mid-call (probe.lua).
--
-- KEYS[1]  the record key
-- KEYS[2]  the scope's probe due set (the record's slot on a Cluster)
-- KEYS[3]  the scope's probe plans hash (same slot)
-- ARGV[1]  owner token of the claim
-- ARGV[2]  the plan text (probe.lua)
-- ARGV[3]  ms from now until a lost owner's record could first be
--          probed: lease + start_after
--
-- Reply:   1 kept; 0 the claim is no longer this owner's, or no longer
--          in flight (nothing written)
local current = redis.call('GET', KEYS[1])
if not current or string.sub(current, 3, 18) ~= ARGV[1] or string.sub(current, 2, 2) ~= '\1' then
  return 0
end
redis.call('HSET', KEYS[3], KEYS[1], ARGV[2])
redis.call('ZADD', KEYS[2], probe_now() + tonumber(ARGV[3]), KEYS[1])
return 1
