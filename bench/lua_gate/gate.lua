-- bench/lua_gate/gate.lua — the nginx+Lua reference of bench/run: the same
-- design as idemgate (claim in Redis, forward once, store the answer fenced
-- by the claim's owner, replay duplicates from Redis), written the way an
-- OpenResty user would, WITHOUT signature verification and without a request
-- fingerprint. Loaded by bench/lua_gate.conf (init_by_lua_block calls
-- configure(), every request runs handle()).
--
-- Record in Redis under PREFIX .. X-GitHub-Delivery, one string:
--   "P" .. owner                 a claim in flight (PX lease)
--   "D" .. status(3 digits) .. body   the stored answer (PX retention)
--
-- Per first delivery: 2 EVALSHA (claim, store); per replay: 1 EVALSHA.
-- Redis connections come from lua-resty-redis's (Debian: nginx.redis)
-- keepalive pool; each request takes one for the claim and gives it back
-- before the backend call, and takes one again for the store.

local redis = require "nginx.redis"

local M = {}

-- Returns the stored record when the key exists (completed or in flight),
-- else claims the key for ARGV[1] with a lease of ARGV[2] ms and returns 0.
local CLAIM = [[
local cur = redis.call('GET', KEYS[1])
if cur then return cur end
redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
return 0
]]

-- Owner fence: writes the answer ARGV[2] for ARGV[3] ms only while the key
-- still holds this request's claim ARGV[1]; 1 when stored, 0 when the claim
-- was lost (lease expired and someone else claimed it, or it was deleted).
local STORE = [[
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
]]

-- Owner fence for giving a claim up after the backend failed.
local RELEASE = [[
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
]]

local cfg = {
  host = "127.0.0.1",
  port = 6379,
  prefix = "luagate:",
  lease_ms = 30000,
  retention_ms = 3600000,
  timeout_ms = 2000,
  pool_size = 64,
  idle_ms = 60000,
  backend = "/_backend",
}

local scripts = {}

local function hex(bin)
  return (bin:gsub(".", function(c) return string.format("%02x", c:byte()) end))
end

local function script(name, text)
  scripts[name] = { text = text, sha = hex(ngx.sha1_bin(text)) }
end

function M.configure(opts)
  for k, v in pairs(opts or {}) do cfg[k] = v end
  script("claim", CLAIM)
  script("store", STORE)
  script("release", RELEASE)
end

local function connect()
  local red = redis:new()
  red:set_timeout(cfg.timeout_ms)
  local ok, err = red:connect(cfg.host, cfg.port)
  if not ok then return nil, err end
  return red
end

local function put_back(red)
  -- Back to the pool; on failure the socket is closed by the library.
  red:set_keepalive(cfg.idle_ms, cfg.pool_size)
end

-- EVALSHA, falling back to EVAL (which also caches the script) when Redis
-- does not know the script yet.
local function run(red, name, key, ...)
  local s = scripts[name]
  local res, err = red:evalsha(s.sha, 1, key, ...)
  if not res and err and err:find("NOSCRIPT", 1, true) then
    res, err = red:eval(s.text, 1, key, ...)
  end
  return res, err
end

-- One Redis call on a pooled connection: connect, script, give it back.
local function call(name, key, ...)
  local red, err = connect()
  if not red then return nil, err end
  local res
  res, err = run(red, name, key, ...)
  if err and not res then
    red:close()
  else
    put_back(red)
  end
  return res, err
end

local seq = 0

local function answer(status, body, replayed)
  ngx.status = status
  ngx.header["Content-Type"] = "text/plain"
  ngx.header["Content-Length"] = #body
  if replayed then ngx.header["Idempotent-Replayed"] = "true" end
  ngx.print(body)
  -- Returning ends the content phase; nginx finalizes the request.
end

function M.handle()
  local delivery = ngx.var.http_x_github_delivery
  if not delivery or delivery == "" then
    return answer(400, "missing X-GitHub-Delivery\n")
  end
  local key = cfg.prefix .. delivery
  seq = seq + 1
  local owner = "P" .. ngx.worker.pid() .. ":" .. ngx.now() .. ":" .. seq

  local rec, err = call("claim", key, owner, cfg.lease_ms)
  if not rec then
    ngx.log(ngx.ERR, "claim failed: ", err)
    return answer(503, "store unavailable\n")
  end
  if rec ~= 0 then
    if rec:byte(1) == 68 then -- "D": completed, replay it
      return answer(tonumber(rec:sub(2, 4)), rec:sub(5), true)
    end
    return answer(409, "in flight\n")
  end

  -- Fresh claim: forward once. The subrequest inherits the request's
  -- headers and (being a POST) its body.
  ngx.req.read_body()
  local res = ngx.location.capture(cfg.backend .. ngx.var.uri,
    { method = ngx.HTTP_POST, args = ngx.var.args })
  if not res or res.status >= 500 or res.truncated then
    call("release", key, owner)
    return answer(502, "backend failed\n")
  end
  local body = res.body or ""
  local stored
  stored, err = call("store", key, owner,
    "D" .. string.format("%03d", res.status) .. body, cfg.retention_ms)
  if not stored then
    ngx.log(ngx.ERR, "store failed: ", err)
  elseif stored == 0 then
    ngx.log(ngx.WARN, "claim of ", key, " lost before the answer was stored")
  end
  return answer(res.status, body)
end

return M
