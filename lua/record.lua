-- record.lua: the record layout of src/record.rs (its "offset size field"
-- table) as the scripts read it. Every script has this file in front of
-- it (src/store/redis/scripts.rs), so each offset is written here once.
-- Lua counts from 1: the layout's byte 0 is string.byte(r, 1).

-- The state byte (layout offset 1).
local IN_FLIGHT = '\1'
local COMPLETED = '\2'
local UNKNOWN = '\3'
local COMPLETED_UNSTORED = '\4'
local INBOX = '\5'

-- The layout version (offset 0): 3 full, 4 compact (an acknowledgement).
local function record_version(r)
  return string.byte(r, 1)
end

-- The state byte of r (offset 1).
local function record_state(r)
  return string.sub(r, 2, 2)
end

-- The owner token of r (offsets 2..17): every write puts a fresh one
-- there, so an owner-checked write can not be won twice.
local function record_owner(r)
  return string.sub(r, 3, 18)
end

-- The state byte and owner token together: what a purge saw (SeenRecord).
local function record_seen(r)
  return string.sub(r, 2, 18)
end

-- Whether a copy of r's delivery is answered from r alone (completed,
-- completed without its answer, or in the inbox): no PTTL is needed.
local function record_answers(r)
  local state = record_state(r)
  return state == COMPLETED or state == COMPLETED_UNSTORED or state == INBOX
end

-- The last byte of r's key value (offset 93 + K - 1, 1-based 93 + K) in a
-- version 3 record, or nil for another version or a short record.
local function record_key_end(r)
  if record_version(r) ~= 3 or string.len(r) < 93 then
    return nil
  end
  return 93 + string.byte(r, 92) * 256 + string.byte(r, 93)
end

-- r with a new state byte and owner token, the rest kept up to its byte
-- `last` (1-based; nil: to the end).
local function record_rewritten(r, state, owner, last)
  return string.sub(r, 1, 1) .. state .. owner .. string.sub(r, 19, last)
end

-- The unknown_hold an in-flight record (version 3) was claimed with, in
-- ms, kept in the 4 bytes after its key value; -1 when it has none (an
-- older record).
local function claim_hold(r)
  local key_end = record_key_end(r)
  if not key_end or string.len(r) ~= key_end + 4 then
    return -1
  end
  local b1, b2, b3, b4 = string.byte(r, key_end + 1, key_end + 4)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end
