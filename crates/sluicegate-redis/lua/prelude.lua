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

-- A time pair (us, r in ticks of 1/d us) written under another d, converted by rounding the
-- sub-microsecond part up (a later time: never grants more).
local function convert_pair(us, r, d_old, d)
  if d_old == d then return us, r end
  local r_new = ceil_div(r * d, d_old)
  if r_new >= d then return us + 1, r_new - d end
  return us, r_new
end

-- Ticks from pair (a_us, a_r) back to pair (b_us, b_r), or 0 if b is not after a;
-- a corrupt-state error if the gap cannot be counted exactly.
local function ticks_after(key, b_us, b_r, a_us, a_r, d)
  if b_us < a_us or (b_us == a_us and b_r <= a_r) then return 0 end
  local whole = b_us - a_us
  if whole >= EXACT / d then fail("corrupt", key .. " lies too far in the future") end
  return whole * d + b_r - a_r
end

local function pexpire(key, ticks, d, grace_ms)
  local ms = ceil_div(ceil_div(ticks, d), 1000) + grace_ms
  if ms < 1 then ms = 1 end
  redis.call("PEXPIRE", key, ms)
end

local function bucket_allow(p, debt_after)
  local left = p.tolerance - debt_after
  if left < 0 then left = 0 end
  return { 1, p.burst, (idiv(left, p.interval)), ceil_div(debt_after, p.d), -1, 0 }
end

local function bucket_deny(p, debt, retry_us)
  local left = p.tolerance - debt
  if left < 0 then left = 0 end
  return { 0, p.burst, (idiv(left, p.interval)), ceil_div(debt, p.d), retry_us, 0 }
end

local function bucket_params(argv, i)
  return {
    d = tonumber(argv[i]),
    interval = tonumber(argv[i + 1]),
    tolerance = tonumber(argv[i + 2]),
    burst = tonumber(argv[i + 3]),
    init_a = tonumber(argv[i + 4]),
    init_b = tonumber(argv[i + 5]),
    max_wait = tonumber(argv[i + 6]),
    grace_ms = tonumber(argv[i + 7]),
  }, i + 8
end
