-- bench/replay_spread.lua — every request is a DUPLICATE of one of many
-- stored deliveries: X-GitHub-Delivery is "<BENCH_FILL_PREFIX>-<n>" with n
-- drawn uniformly from BENCH_SPREAD_FROM .. BENCH_SPREAD_TO, each draw on
-- its own. bench/scale fills the store with the records of exactly those
-- deliveries (bench/fill.rs, FILL_DELIVERIES) before idemgate starts, so
-- every request is answered from a stored record, and the round measures
-- how often the replay cache holds it (idemgate_replay_cache_hits_total
-- against _misses_total) when the replayed set is larger than the cache.

local common = dofile((os.getenv("BENCH_LUA_DIR") or "bench") .. "/common.lua")
local prefix = assert(os.getenv("BENCH_FILL_PREFIX"), "BENCH_FILL_PREFIX unset") .. "-"
local from = assert(tonumber(os.getenv("BENCH_SPREAD_FROM") or ""), "BENCH_SPREAD_FROM unset")
local to = assert(tonumber(os.getenv("BENCH_SPREAD_TO") or ""), "BENCH_SPREAD_TO unset")

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

function init(args)
  -- Each thread its own sequence (wrk's threads start with one seed).
  math.randomseed(os.time() * 1000 + tid)
end

function request()
  return common.request(prefix .. math.random(from, to))
end

done = common.done
