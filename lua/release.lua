-- release.lua: give up a claim so the sender's next retry is a first delivery.
--
-- KEYS[1]  the record key
-- ARGV[1]  owner token (16 bytes) written by claim.lua
--
-- Reply:   1 deleted; 0 the key expired or another owner holds it (nothing deleted)
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 3, 18) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
