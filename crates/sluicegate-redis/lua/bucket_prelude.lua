-- Helpers of the bucket algorithms: time pairs, decisions, parameters.
-- Concatenated after prelude.lua (see src/scripts.rs).

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

local function bucket_allow(p, debt_after)
  local left = p.tolerance - debt_after
  if left < 0 then left = 0 end
  return { 1, p.burst, (idiv(left, p.interval)), ceil_div(debt_after, p.d), -1, 0 }
end

-- An allowed peek: nothing taken, so what is left is what the bucket holds at `debt`; the
-- reset is the grant's, at `debt_after` (bucket.rs's peek).
local function bucket_peek(p, debt, debt_after)
  local left = p.tolerance - debt
  if left < 0 then left = 0 end
  return { 1, p.burst, (idiv(left, p.interval)), ceil_div(debt_after, p.d), -1, 0 }
end

local function bucket_deny(p, debt, retry_us)
  local left = p.tolerance - debt
  if left < 0 then left = 0 end
  return { 0, p.burst, (idiv(left, p.interval)), ceil_div(debt, p.d), retry_us, 0 }
end

-- A bucket's parameters from argv[i] on: d, interval, tolerance, burst, initial pair,
-- max_wait, grace_ms. Never modified once built (one_params keeps them); gcra_fresh adds
-- what it derives from them.
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

local function one_bucket_params(list)
  if #list ~= 8 then fail("args", "bucket parameters") end
  return (bucket_params(list, 1))
end

-- GCRA's and the leaky queue's state: the TAT as a pair (t us, r ticks of 1/d us), stored as
-- "t:r:d", or as "t" alone when d = 1 (whole microseconds, so r = 0: the common case, parsed
-- by one tonumber); converted to p.d; the initial pair if the key is missing.
local function read_tat(key, p)
  local raw = get_state(key)
  if raw == false then return p.init_a, p.init_b end
  local t = to_number(raw)
  if t ~= nil then
    t = int_field(key, "t", t, 0, 2 ^ 53)
    if p.d == 1 then return t, 0 end
    return convert_pair(t, 0, 1, p.d)
  end
  local t_raw, r, d = string.match(raw, "^(%d+):(%d+):(%d+)$")
  if t_raw == nil then bad_state(key, raw) end
  local d_old = int_field(key, "d", d, 1, 1024)
  return convert_pair(int_field(key, "t", t_raw, 0, 2 ^ 53), int_field(key, "r", r, 0, d_old - 1),
    d_old, p.d)
end

-- Stores the TAT `debt_after` ticks after `at` (default `now`; a lease's charge time,
-- lease.lua, is later), living until then.
local function write_tat(key, now, debt_after, p, at)
  local value
  local ahead = 0
  if at ~= nil then ahead = at - now else at = now end
  if p.d == 1 then
    value = format("%d", at + debt_after)
  else
    local q, r = idiv(debt_after, p.d)
    value = format("%d:%d:%d", at + q, r, p.d)
  end
  set_state(key, value, ahead * p.d + debt_after, p.d, p.grace_ms)
end

-- The leaky bucket's state, the string "l:u:r:d:i" (level in ticks, the pair (u, r)
-- it was measured at, d, interval): l as found, u, r, d and i checked; nil if the key is
-- missing.
local function read_level(key)
  local raw = get_state(key)
  if raw == false then return nil end
  local l, u, r, d, i = string.match(raw, "^(%-?%d+):(%d+):(%d+):(%d+):(%d+)$")
  if l == nil then bad_state(key, raw) end
  local d_old = int_field(key, "d", d, 1, 1024)
  return l, int_field(key, "u", u, 0, 2 ^ 53), int_field(key, "r", r, 0, d_old - 1), d_old,
    int_field(key, "i", i, 1, EXACT)
end

-- Stores a level measured at pair (u, r), living `ticks` from now.
local function write_level(key, level, u, r, p, ticks)
  set_state(key, string.format("%d:%d:%d:%d:%d", level, u, r, p.d, p.interval), ticks, p.d,
    p.grace_ms)
end
