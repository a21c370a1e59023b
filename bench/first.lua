-- bench/first.lua — every request is a FIRST delivery: a unique
-- X-GitHub-Delivery per request, "<BENCH_RUN_ID>-<BENCH_ROUND>-<thread>-<n>",
-- so neither another thread, another round nor a rerun of bench/run ever
-- hits an existing key. Same fixed body and precomputed signature each time
-- (GitHub signs only the body; the delivery id is not signed).
--
-- Also used, unchanged, for the direct-backend and nginx pass-through
-- rounds: the same POST with the same headers and body (those servers ignore
-- the headers), so the load generator's cost is identical in every round.

local common = dofile((os.getenv("BENCH_LUA_DIR") or "bench") .. "/common.lua")

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local prefix
local counter = 0
function init(args)
  prefix = string.format("%s-%s-%d-",
    os.getenv("BENCH_RUN_ID") or "norun", os.getenv("BENCH_ROUND") or "r", tid or 0)
end

function request()
  counter = counter + 1
  return common.request(prefix .. counter)
end

done = common.done
