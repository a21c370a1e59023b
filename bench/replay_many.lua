-- bench/replay_many.lua — one pass over a KNOWN sequence of many distinct
-- delivery ids, "<BENCH_FILL_PREFIX>-<n>" for n = 1 .. BENCH_FILL_KEYS, used
-- by bench/run to fill idemgate's replay cache before the peak-RSS round:
-- run once, every request is that key's first delivery (forwarded and
-- stored); run again over the same sequence, every request is a duplicate
-- of an already-delivered key (replayed, and cached by idemgate).
--
-- wrk thread t of T sends n = t, t + T, t + 2T, ... and stops sending once
-- its share is sent; wrk itself still runs until its -d (bench/run bounds
-- every pass). wrk calls the first thread's request() once before the run
-- to check the script, and never sends that request: key 1 is skipped in
-- both passes alike. After the stop, each thread sends one more duplicate
-- of its last key.

local common = dofile((os.getenv("BENCH_LUA_DIR") or "bench") .. "/common.lua")
local prefix = assert(os.getenv("BENCH_FILL_PREFIX"), "BENCH_FILL_PREFIX unset") .. "-"
local keys = tonumber(os.getenv("BENCH_FILL_KEYS") or "") or 1000

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n, step
function init(args)
  -- The thread count (wrk -t), from bench/run: setup() runs per thread,
  -- so no thread knows the total when it is set up.
  step = tonumber(os.getenv("BENCH_FILL_THREADS") or "") or 1
  n = tid - step
end

function request()
  n = n + step
  if n > keys then
    wrk.thread:stop()
    -- wrk still sends what this call returns: repeat the last key of this
    -- thread's share (one more duplicate, harmless).
    n = keys - ((keys - tid) % step)
  end
  return common.request(prefix .. n)
end

done = common.done
