-- Sluicegate: one or more limits decided atomically, all or nothing.
--
-- Mirrors the Rust core (crates/sluicegate/src/algorithm) decision for decision. Lua numbers
-- are IEEE doubles, exact for integers below 2^53, while a time in ticks since the epoch
-- (microseconds times up to 1024) is far above that. So a time is kept as a pair
-- (whole microseconds, remainder in ticks below d), and only differences between times are
-- ever formed in ticks: those are bounded by a bucket's tolerance, which the Rust side keeps
-- below 2^50. Every division goes through idiv, which corrects the float quotient.
--
-- ARGV: now ("" = the server's TIME), op, limit count, then per limit:
--   kind, permits, then the kind's parameters (see the decide_* functions).
-- KEYS: per limit, in order: one key (gcra, token-bucket) or two (concurrency).
-- Reply: {"OK", now, then per limit: allowed, limit, remaining, reset_us, retry_us (-1: none),
--   wait_us} or {"ERR", kind, detail}.

local EXACT = 4503599627370496 -- 2^52: every stored difference stays below this
-- Numbers reach Redis as arguments of redis.call, which writes them exactly (%.17g); never
-- through Lua's own tostring or `..`, which keep only 14 digits.

local function fail(kind, detail)
  return error({ sluicegate = true, kind = kind, detail = detail })
end

-- q, r with a = q * b + r and 0 <= r < b, for exact integers 0 <= a < 2^53, 0 < b.
local function idiv(a, b)
  local q = math.floor(a / b)
  local r = a - q * b
  while r < 0 do q = q - 1; r = r + b end
  while r >= b do q = q + 1; r = r - b end
  return q, r
end

local function ceil_div(a, b)
  local q, r = idiv(a, b)
  if r > 0 then q = q + 1 end
  return q
end

-- A stored field as an exact integer in [lo, hi], or a corrupt-state error naming it.
local function int_field(key, name, raw, lo, hi)
  local n = tonumber(raw)
  if n == nil or n ~= math.floor(n) or n < lo or n > hi then
    fail("corrupt", key .. " field " .. name .. " = " .. tostring(raw))
  end
  return n
end

local function hash_fields(key, ...)
  local ok, values = pcall(redis.call, "HMGET", key, ...)
  if not ok then fail("corrupt", key .. ": " .. tostring(values.err or values)) end
  return values
end

local function pexpire(key, ticks, d, grace_ms)
  local ms = ceil_div(ceil_div(ticks, d), 1000) + grace_ms
  if ms < 1 then ms = 1 end
  redis.call("PEXPIRE", key, ms)
end

-- The time of the decision: ARGV[1] in microseconds, or Redis's clock (TIME) if empty.
local function decision_time()
  if ARGV[1] == "" then
    local t = redis.call("TIME")
    return tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return tonumber(ARGV[1])
end

-- One limit's reply, its state charged if it allowed and op is not a peek.
local function single_reply(now, op, decision, commit)
  if decision[1] == 1 and op ~= "peek" then commit() end
  return { "OK", now, decision[1], decision[2], decision[3], decision[4], decision[5],
    decision[6] }
end

-- The script's reply from pcall(run): run's reply, or {"ERR", kind, detail}.
local function finish(ok, result)
  if ok then return result end
  if type(result) == "table" and result.sluicegate then
    return { "ERR", result.kind, result.detail }
  end
  return { "ERR", "script", tostring(type(result) == "table" and result.err or result) }
end
