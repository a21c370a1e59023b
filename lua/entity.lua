-- entity.lua: the entity rules (src/store/entity.rs, module docs), put in
-- front of claim_entity.lua, complete.lua and swap.lua when they are
-- compiled in. src/store/entity.rs has the same rules in Rust for the
-- embedded store; the contract suite runs one set of cases on both.
--
-- An entity is a hash at {prefix}:{scope}:entity:{hash}; its records end
-- in the same {hash} tag, so they share its Cluster slot. Fields:
--   s   current state           at  when it was entered (unix ms)
--   pk  the pending change's record key; pf its from-state ('' none),
--       pt its to-state
--   h   history, newest first: kind \t from \t to \t delivery \t ms per
--       line, kind a(pplied) / x (refused) / r(epeat)
--   n, x, r  applied, refused and repeated counts
local ENTITY_HISTORY = 16

local function entity_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The history with one line added in front (at most ENTITY_HISTORY).
local function entity_history(ekey, kind, from, to, record_key, now)
  local delivery = string.match(record_key, '[^:]*$')
  local lines = { kind .. '\t' .. (from or '') .. '\t' .. to .. '\t' .. delivery .. '\t' .. now }
  local old = redis.call('HGET', ekey, 'h')
  if old then
    for line in string.gmatch(old, '[^\n]+') do
      if #lines >= ENTITY_HISTORY then
        break
      end
      lines[#lines + 1] = line
    end
  end
  return table.concat(lines, '\n')
end

-- What a write of record_key means for ekey's pending change, if the
-- record is that change: 'apply' (the handler succeeded: the entity takes
-- the pending state), 'drop' (the change never happened), 'keep'.
local function entity_settle(ekey, record_key, effect)
  if effect == 'keep' or redis.call('HGET', ekey, 'pk') ~= record_key then
    return
  end
  if effect == 'apply' then
    local now = entity_now()
    local pending = redis.call('HMGET', ekey, 'pf', 'pt')
    local from = pending[1]
    if from == '' then
      from = false
    end
    local history = entity_history(ekey, 'a', from or nil, pending[2], record_key, now)
    redis.call('HSET', ekey, 's', pending[2], 'at', now, 'h', history)
    redis.call('HINCRBY', ekey, 'n', 1)
  end
  redis.call('HDEL', ekey, 'pk', 'pf', 'pt')
end
