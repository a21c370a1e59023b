-- probe.lua: the probe rules every script that settles a record of a
-- route with [route.probe] shares (src/store/probe.rs has the Rust side).
--
-- A record that may turn unknown carries a probe plan in its scope's probe
-- hash (field: the record key; on a Cluster the hash and the due set are
-- named by the record's own slot, so one script changes all three), and
-- sits in the scope's due set, scored by when an instance should look at
-- it next (server time, ms). A plan is text:
--   start_after_ms \t hold_ms \t attempts \t done \t route \t last \t target
-- start_after and hold let a script judge the record without the route's
-- settings; `done` is 1 once the attempts are spent.

-- The rules are made when a script calls probe_rules(), which returns
-- them by their names without the probe_ prefix (entity.lua says why).
local function probe_rules()
  -- The server's clock in milliseconds: every instance judges a plan by
  -- the same clock.
  local function probe_now()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end

  -- The numbers at the front of a plan, and the rest of it.
  local function probe_parse(plan)
    local start_after, hold, attempts, done, rest =
      string.match(plan, '^(%d+)\t(%d+)\t(%d+)\t(%d)\t(.*)$')
    if not start_after then
      return nil
    end
    return tonumber(start_after), tonumber(hold), tonumber(attempts), done, rest
  end

  -- A claim keeps its delivery's plan: due `first` ms from now (lease +
  -- start_after: the earliest a lost owner's record could be probed).
  local function probe_arm(due, plans, member, plan, first)
    redis.call('HSET', plans, member, plan)
    redis.call('ZADD', due, probe_now() + tonumber(first), member)
  end

  -- The record is settled (completed, queued or gone): its plan goes.
  local function probe_forget(due, plans, member)
    redis.call('ZREM', due, member)
    redis.call('HDEL', plans, member)
  end

  -- The record just turned unknown: its first attempt is start_after (plus
  -- `jitter` ms) from now.
  local function probe_schedule(due, plans, member, jitter)
    local plan = redis.call('HGET', plans, member)
    if not plan then
      return
    end
    local start_after = probe_parse(plan)
    if start_after then
      redis.call('ZADD', due, probe_now() + start_after + tonumber(jitter), member)
    end
  end

  -- What a write of a record in `state` (its state byte) means for its plan.
  local function probe_settle(due, plans, member, state, jitter)
    if state == UNKNOWN then
      probe_schedule(due, plans, member, jitter)
    else
      probe_forget(due, plans, member)
    end
  end

  return {
    now = probe_now,
    parse = probe_parse,
    arm = probe_arm,
    forget = probe_forget,
    settle = probe_settle,
  }
end
