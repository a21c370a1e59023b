-- bench/common.lua — shared by first.lua and replay.lua (loaded with dofile).
--
-- Environment (set by bench/run):
--   BENCH_BODY_FILE   the fixed ~1 KiB JSON body
--   BENCH_SIGNATURE   "sha256=<hex HMAC-SHA256(secret, body)>", computed once
--                     with openssl by bench/run
--   BENCH_PATH        request path (default /hook)
--   BENCH_KEY_HEADER  the header that carries the delivery id (default
--                     X-GitHub-Delivery; the peer proxy's rows use
--                     Idempotency-Key, the only key it reads)
--
-- Every request is built per call with wrk.format in every round (direct,
-- nginx, first, replay), so wrk spends the same CPU per request whichever
-- server it measures.

local M = {}

local function read_file(path)
  local f = assert(io.open(path, "rb"), "cannot open " .. tostring(path))
  local data = f:read("*a")
  f:close()
  return data
end

M.path = os.getenv("BENCH_PATH") or "/hook"
M.body = read_file(assert(os.getenv("BENCH_BODY_FILE"), "BENCH_BODY_FILE unset"))
M.headers = {
  ["Content-Type"] = "application/json",
  ["User-Agent"] = "GitHub-Hookshot/bench",
  ["X-GitHub-Event"] = "push",
  ["X-Hub-Signature-256"] = assert(os.getenv("BENCH_SIGNATURE"), "BENCH_SIGNATURE unset"),
}

local key_header = os.getenv("BENCH_KEY_HEADER") or "X-GitHub-Delivery"

function M.request(delivery)
  M.headers[key_header] = delivery
  return wrk.format("POST", M.path, M.headers, M.body)
end

-- One machine-readable line for bench/run, from the same HdrHistogram that
-- wrk's own "Latency Distribution" prints (values in microseconds).
function M.done(summary, latency, requests)
  io.write(string.format(
    "BENCH_RESULT requests=%d duration_us=%d bytes=%d p50_us=%.0f p90_us=%.0f p99_us=%.0f max_us=%.0f " ..
    "status_errors=%d connect_errors=%d read_errors=%d write_errors=%d timeouts=%d\n",
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    summary.errors.status, summary.errors.connect, summary.errors.read,
    summary.errors.write, summary.errors.timeout))
end

return M
