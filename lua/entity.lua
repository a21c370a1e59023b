-- entity.lua: the entity rules (src/store/entity.rs, module docs), put in
-- front of claim_entity.lua, complete.lua and swap.lua when they are
-- compiled in. src/store/entity.rs has the same rules in Rust for the
-- embedded store; the contract suite runs one set of cases on both.
--
-- An entity is a hash at {prefix}:{scope}:entity:{hash}; its records end
-- in the same {hash} tag, so they share its Cluster slot. Fields:
--   s   current state           at  when it was entered (unix ms)
--   pk  the pending change's record key; pf its from-state ('' none),
--       pt its to-state, pe its event (hashed; absent: none)
--   e   the events (hashed) taken while in s, one a line, oldest first,
--       at most ENTITY_EVENTS; a change to another state starts them again
--   h   history, newest first: kind \t from \t to \t delivery \t ms per
--       line, kind a(pplied) / x (refused) / r(epeat)
--   n, x, r  applied, refused and repeated counts
--   q   notices held behind the entity, oldest first, one line each:
--       record \t to \t initial (0|1) \t from|from… \t event
--       (store/entity/held.rs)
--
-- The rules are made when a script calls entity_rules(), which returns
-- them by their names without the entity_ prefix: a script that does not
-- touch an entity this time (complete.lua on a route without one) then
-- makes one closure instead of a dozen, which measured about 1.3 µs of
-- Redis CPU per call (bench/RESULTS.md, "What the features cost").
local function entity_rules()
  local ENTITY_HISTORY = 16
  local ENTITY_EVENTS = 64

  -- Whether `event` is one of the lines of `events` (false, or text).
  local function entity_has_event(events, event)
    if not events then
      return false
    end
    for line in string.gmatch(events, '[^\n]+') do
      if line == event then
        return true
      end
    end
    return false
  end

  -- The events of ekey after entering `to` with `event` ('' : none): the
  -- same state adds it (the oldest past ENTITY_EVENTS falls out), another
  -- state starts again. Returns the text, or false for none.
  local function entity_events_after(ekey, to, event)
    local current = redis.call('HMGET', ekey, 's', 'e')
    local lines = {}
    if current[1] == to and current[2] then
      for line in string.gmatch(current[2], '[^\n]+') do
        lines[#lines + 1] = line
      end
    end
    if event and event ~= '' then
      lines[#lines + 1] = event
    end
    while #lines > ENTITY_EVENTS do
      table.remove(lines, 1)
    end
    if #lines == 0 then
      return false
    end
    return table.concat(lines, '\n')
  end

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

  -- The held notices of ekey (field q), oldest first, each with its line.
  local function entity_held(ekey)
    local held = {}
    local text = redis.call('HGET', ekey, 'q')
    if text then
      for line in string.gmatch(text, '[^\n]+') do
        local record, to, initial, from, event =
          string.match(line, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
        if record then
          held[#held + 1] = { record = record, to = to, initial = initial, from = from, event = event, line = line }
        end
      end
    end
    return held
  end

  -- Writes the held notices back (the field goes with the last one).
  local function entity_store_held(ekey, held)
    if #held == 0 then
      redis.call('HDEL', ekey, 'q')
      return
    end
    local lines = {}
    for i, h in ipairs(held) do
      lines[i] = h.line
    end
    redis.call('HSET', ekey, 'q', table.concat(lines, '\n'))
  end

  -- Takes record_key out of the held notices, if it is one.
  local function entity_unhold(ekey, record_key)
    local held = entity_held(ekey)
    for i, h in ipairs(held) do
      if h.record == record_key then
        table.remove(held, i)
        entity_store_held(ekey, held)
        return
      end
    end
  end

  -- Judges a change of ekey to `to` (with `event`, hashed; '' none) by
  -- record_key, enterable from the states in `sources` (and from none if
  -- initial): nil when allowed (the change is now pending), else the verdict
  -- { 0, 'repeat' } or { 0, 'refused', from } ('' : no state yet),
  -- remembered in the history. The same state is a repeat unless it comes
  -- with an event the entity did not enter it with.
  local function entity_judge(ekey, record_key, to, initial, sources, event)
    local current = redis.call('HMGET', ekey, 's', 'e')
    local from = current[1]
    local same = from == to
    if same and (event == '' or entity_has_event(current[2], event)) then
      local history = entity_history(ekey, 'r', from, to, record_key, entity_now())
      redis.call('HSET', ekey, 'h', history)
      redis.call('HINCRBY', ekey, 'r', 1)
      return { 0, 'repeat' }
    end
    local allowed = same
    if not from then
      allowed = initial
    elseif not same then
      for _, source in ipairs(sources) do
        if source == from then
          allowed = true
          break
        end
      end
    end
    if not allowed then
      local history = entity_history(ekey, 'x', from or nil, to, record_key, entity_now())
      redis.call('HSET', ekey, 'h', history)
      redis.call('HINCRBY', ekey, 'x', 1)
      return { 0, 'refused', from or '' }
    end
    redis.call('HSET', ekey, 'pk', record_key, 'pf', from or '', 'pt', to)
    if event ~= '' then
      redis.call('HSET', ekey, 'pe', event)
    else
      redis.call('HDEL', ekey, 'pe')
    end
    return nil
  end

  -- What a write of record_key means for ekey's pending change, if the
  -- record is that change: 'apply' (the handler succeeded: the entity takes
  -- the pending state), 'drop' (the change never happened; a held notice
  -- dropped or purged also leaves the queue), 'keep'.
  local function entity_settle(ekey, record_key, effect)
    if effect == 'keep' then
      return
    end
    if effect == 'drop' then
      entity_unhold(ekey, record_key)
    end
    if redis.call('HGET', ekey, 'pk') ~= record_key then
      return
    end
    if effect == 'apply' then
      local now = entity_now()
      local pending = redis.call('HMGET', ekey, 'pf', 'pt', 'pe')
      local from = pending[1]
      if from == '' then
        from = false
      end
      local history = entity_history(ekey, 'a', from or nil, pending[2], record_key, now)
      local events = entity_events_after(ekey, pending[2], pending[3])
      redis.call('HSET', ekey, 's', pending[2], 'at', now, 'h', history)
      if events then
        redis.call('HSET', ekey, 'e', events)
      else
        redis.call('HDEL', ekey, 'e')
      end
      redis.call('HINCRBY', ekey, 'n', 1)
    end
    redis.call('HDEL', ekey, 'pk', 'pf', 'pt', 'pe')
  end

  -- The pending change's record key as the script's caller declared it
  -- among the KEYS, or the entity key itself (ekey) for none, so a script
  -- only ever touches keys it was given (the Redis rule; servers such as
  -- Dragonfly refuse anything else, and a slot migration moves only the
  -- keys a command names). false for none. The caller declares none first
  -- (most entities have no change pending) and, told 'moved', the key the
  -- reply names.
  local function entity_declared(ekey, declared)
    if declared == ekey then
      return false
    end
    return declared
  end

  -- What holds ekey for a new notice: nil (free), { 0, 'moved', pk } when
  -- the pending change is not the one declared (pk: its record key, '' for
  -- none; the caller declares it and retries), or the busy reply
  -- { 0, 'busy', pttl, kind, hold } of claim_entity.lua (hold: the pending
  -- claim's own, claim_hold, for kind 'flight'). The pending change's
  -- record shares the entity's slot (same tag); a completed one is folded
  -- in. `declared` is the KEYS entry entity_declared reads.
  local function entity_blocker(ekey, declared)
    local pending_key = entity_declared(ekey, declared)
    local current = redis.call('HGET', ekey, 'pk') or false
    if current ~= pending_key then
      return { 0, 'moved', current or '' }
    end
    if pending_key then
      local pending = redis.call('GET', pending_key)
      local state = pending and record_state(pending)
      if state == COMPLETED or state == COMPLETED_UNSTORED then
        entity_settle(ekey, pending_key, 'apply')
      elseif not pending then
        return { 0, 'busy', -2, 'unresolved' }
      else
        local kind = 'inbox'
        if state == IN_FLIGHT then
          return { 0, 'busy', redis.call('PTTL', pending_key), 'flight', claim_hold(pending) }
        elseif state == UNKNOWN then
          kind = 'unknown'
        end
        return { 0, 'busy', redis.call('PTTL', pending_key), kind }
      end
    end
    if redis.call('HEXISTS', ekey, 'q') == 1 then
      return { 0, 'busy', -2, 'queue' }
    end
    return nil
  end

  -- Whether a worker may send the queued delivery record_key of ekey now
  -- (store/entity/held.rs, EntityState::take): nil to send it (it left the
  -- queue as the pending change), else { 0, 'wait' }, or the verdict of its
  -- turn with its announced state after it: { 0, 'repeat', to } /
  -- { 0, 'refused', from, to } (it stays at the front until its drop).
  local function entity_take(ekey, record_key)
    local pk = redis.call('HGET', ekey, 'pk')
    if pk == record_key then
      return nil
    end
    if pk then
      return { 0, 'wait' }
    end
    local held = entity_held(ekey)
    for i, h in ipairs(held) do
      if h.record == record_key then
        if i > 1 then
          return { 0, 'wait' }
        end
        local sources = {}
        for source in string.gmatch(h.from, '[^|]+') do
          sources[#sources + 1] = source
        end
        local verdict = entity_judge(ekey, record_key, h.to, h.initial == '1', sources, h.event)
        if verdict then
          -- Decided: it stays at the front until the worker's drop (a
          -- second write, 'drop' in entity_settle) takes it out, so a lost
          -- drop means judged again, never sent unjudged.
          verdict[#verdict + 1] = h.to
          return verdict
        end
        table.remove(held, 1)
        entity_store_held(ekey, held)
        return nil
      end
    end
    return nil
  end

  return {
    events_after = entity_events_after,
    now = entity_now,
    history = entity_history,
    held = entity_held,
    store_held = entity_store_held,
    judge = entity_judge,
    settle = entity_settle,
    blocker = entity_blocker,
    take = entity_take,
  }
end
