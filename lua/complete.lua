-- complete.lua: store the outcome of a claimed key, if we still own it.
--
-- KEYS[1]  the record key
-- ARGV[1]  owner token (16 bytes) written by claim.lua
-- ARGV[2]  the encoded completed or unknown record (see src/record.rs)
-- ARGV[3]  TTL in milliseconds (retention, or unknown_hold)
--
-- Reply:   1 stored; 0 the key expired or another owner holds it (nothing written)
--
-- The owner token sits at bytes 3..18 (1-based) of every record version 1.
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 3, 18) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
