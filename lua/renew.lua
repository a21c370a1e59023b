-- renew.lua: extend an in-flight claim while its upstream call runs.
--
-- KEYS[1]  the record key
-- ARGV[1]  owner token (16 bytes) written by claim.lua
-- ARGV[2]  new TTL in milliseconds (lease + unknown_hold)
--
-- Reply:   1 renewed; 0 the key expired, is no longer in flight, or another
--          owner holds it
--
-- Byte 2 of the record is its state; "\1" is in-flight.
local current = redis.call('GET', KEYS[1])
if current and record_owner(current) == ARGV[1] and record_state(current) == IN_FLIGHT then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
