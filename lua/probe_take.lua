-- probe_take.lua: an instance takes a due probe: the record becomes its
-- own (a new owner token, state unknown, the same expiry), so it alone
-- may settle it, and for `lease` ms no other instance takes it.
--
-- KEYS[1]  the record key
-- KEYS[2]  the scope's probe due set
-- KEYS[3]  the scope's probe plans hash
-- ARGV[1]  the taker's owner token (16 bytes)
-- ARGV[2]  the probe lease in ms: how long the taker has to ask and settle
--
-- Reply:   { 0 }                      nothing to probe (the plan is gone,
--                                     or forgotten now: the record is
--                                     settled, gone or unreadable)
--          { 1 }                      not yet: the owner still renews its
--                                     claim, the attempt is not due, or
--                                     the attempts are spent (the entry
--                                     waits until the record expires)
--          { 2, record, pttl, plan }  taken: the record as rewritten, its
--                                     remaining TTL and the plan (its
--                                     attempts already counting this one)
local member = KEYS[1]
local plan = redis.call('HGET', KEYS[3], member)
if not plan then
  redis.call('ZREM', KEYS[2], member)
  return { 0 }
end
local probe = probe_rules()
local start_after, hold, attempts, done, rest = probe.parse(plan)
local record = redis.call('GET', KEYS[1])
if not start_after or not record or record_version(record) == 4 then
  probe.forget(KEYS[2], KEYS[3], member)
  return { 0 }
end
local state = record_state(record)
if state ~= IN_FLIGHT and state ~= UNKNOWN then
  probe.forget(KEYS[2], KEYS[3], member)
  return { 0 }
end
local now = probe.now()
local pttl = redis.call('PTTL', KEYS[1])
if pttl < 0 then
  pttl = hold
end
if done == '1' then
  redis.call('ZADD', KEYS[2], now + pttl + 1000, member)
  return { 1 }
end
local due
if state == IN_FLIGHT then
  -- In flight: its owner renews the claim to lease + hold; once the TTL
  -- is down to the hold, it stopped at (now - (hold - pttl)), and its
  -- call ended no later than that.
  due = now - (hold - pttl) + start_after
else
  due = tonumber(redis.call('ZSCORE', KEYS[2], member) or now)
end
if due > now then
  redis.call('ZADD', KEYS[2], due, member)
  return { 1 }
end
-- An in-flight record of layout version 3 may end with its claim's hold
-- (after the key value, record.lua); an unknown record carries none, so
-- the hold is left out.
local last = nil
if state == IN_FLIGHT then
  last = record_key_end(record)
end
local taken = record_rewritten(record, UNKNOWN, ARGV[1], last)
redis.call('SET', KEYS[1], taken, 'KEEPTTL')
plan = start_after .. '\t' .. hold .. '\t' .. (attempts + 1) .. '\t' .. done .. '\t' .. rest
redis.call('HSET', KEYS[3], member, plan)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), member)
return { 2, taken, pttl, plan }
