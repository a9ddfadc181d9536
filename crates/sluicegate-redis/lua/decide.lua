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

-- GCRA (gcra.rs). State: hash {t = TAT us, r = TAT remainder ticks, d}.
-- Parameters: d, interval, tolerance, burst, initial TAT us, initial TAT remainder,
-- max_wait_us (-1: none), grace_ms.
local function decide_gcra(key, now, n, op, p)
  local f = hash_fields(key, "t", "r", "d")
  local tat_us, tat_r
  if f[1] == false then
    tat_us, tat_r = p.init_a, p.init_b
  else
    local d_old = int_field(key, "d", f[3], 1, 1024)
    tat_us = int_field(key, "t", f[1], 0, 2 ^ 53)
    tat_r = int_field(key, "r", f[2], 0, d_old - 1)
    tat_us, tat_r = convert_pair(tat_us, tat_r, d_old, p.d)
  end
  local debt = ticks_after(key, tat_us, tat_r, now, 0, p.d)
  local debt_after = debt + n * p.interval
  local function commit()
    local q, r = idiv(debt_after, p.d)
    redis.call("HSET", key, "t", now + q, "r", r, "d", p.d)
    pexpire(key, debt_after, p.d, p.grace_ms)
  end
  if debt_after <= p.tolerance then
    return bucket_allow(p, debt_after), commit
  end
  local wait = ceil_div(debt_after - p.tolerance, p.d)
  if op == "reserve" and (p.max_wait < 0 or wait <= p.max_wait) then
    if debt_after >= EXACT then fail("overflow", key .. ": reservation too far ahead") end
    local decision = bucket_allow(p, debt_after)
    decision[6] = wait
    return decision, commit
  end
  return bucket_deny(p, debt, wait), nil
end

-- Token bucket (token_bucket.rs). State: hash {l = level ticks (negative after
-- reservations), u = refilled-at us, r = refilled-at remainder ticks, d, i = interval}.
-- Parameters as GCRA, with the initial level in place of the initial TAT pair.
local function decide_token_bucket(key, now, n, op, p)
  local full = p.tolerance
  local f = hash_fields(key, "l", "u", "r", "d", "i")
  local level, ref_us, ref_r
  if f[1] == false then
    level, ref_us, ref_r = p.init_a, 0, 0
  else
    local d_old = int_field(key, "d", f[4], 1, 1024)
    local i_old = int_field(key, "i", f[5], 1, EXACT)
    level = int_field(key, "l", f[1], -EXACT, EXACT)
    ref_us = int_field(key, "u", f[2], 0, 2 ^ 53)
    ref_r = int_field(key, "r", f[3], 0, d_old - 1)
    ref_us, ref_r = convert_pair(ref_us, ref_r, d_old, p.d)
    if d_old ~= p.d or i_old ~= p.interval then
      -- Other parameters: keep the time until full (rounded up), not the level.
      local gap_us = ceil_div(math.max(0, full - level), d_old)
      level = full - gap_us * p.d
      if level < -EXACT then level = -EXACT end
    end
  end
  if full - level >= EXACT then fail("corrupt", key .. " level out of range") end
  -- now_t = max(now in ticks, refilled_at), as a pair.
  local now_us, now_r = now, 0
  local elapsed
  if ref_us > now or (ref_us == now and ref_r > 0) then
    now_us, now_r = ref_us, ref_r
    elapsed = 0
  elseif now - ref_us > ceil_div(full - level, p.d) + 1 then
    elapsed = full - level
  else
    elapsed = (now - ref_us) * p.d - ref_r
  end
  local level_at = math.min(level + elapsed, full)
  local after = level_at - n * p.interval
  local debt_after = full - after
  local function commit()
    redis.call("HSET", key, "l", after, "u", now_us, "r", now_r, "d", p.d, "i", p.interval)
    pexpire(key, debt_after + (now_us - now) * p.d + now_r, p.d, p.grace_ms)
  end
  if after >= 0 then
    return bucket_allow(p, debt_after), commit
  end
  local wait = ceil_div(-after, p.d)
  if op == "reserve" and (p.max_wait < 0 or wait <= p.max_wait) then
    if debt_after >= EXACT then fail("overflow", key .. ": reservation too far ahead") end
    local decision = bucket_allow(p, debt_after)
    decision[6] = wait
    return decision, commit
  end
  return bucket_deny(p, full - level_at, wait), nil
end

-- Concurrency (concurrency.rs) with leases. KEYS: a sorted set of lease ids scored by their
-- expiry (us) and a hash {lease id = permits, "#" = permits held}. Parameters: limit, lease
-- id, lease_us, grace_ms. Ops: check/peek take, release gives a lease back, renew extends it.
local function decide_concurrency(zkey, hkey, now, n, op, limit, lease, lease_us, grace_ms)
  local held_raw = hash_fields(hkey, "#")[1]
  local held = 0
  if held_raw ~= false then held = int_field(hkey, "#", held_raw, 0, EXACT) end
  local ok, expired = pcall(redis.call, "ZRANGEBYSCORE", zkey, "-inf", now)
  if not ok then fail("corrupt", zkey .. ": " .. tostring(expired.err or expired)) end
  for _, id in ipairs(expired) do
    local permits = int_field(hkey, id, hash_fields(hkey, id)[1] or 0, 0, held)
    held = held - permits
    redis.call("HDEL", hkey, id)
    redis.call("ZREM", zkey, id)
  end
  if #expired > 0 then
    if held == 0 then
      redis.call("DEL", zkey, hkey)
    else
      redis.call("HSET", hkey, "#", held)
    end
  end
  local function refresh_expiry()
    local last = redis.call("ZRANGE", zkey, -1, -1, "WITHSCORES")
    if last[2] ~= nil then
      local ms = ceil_div(math.max(0, tonumber(last[2]) - now), 1000) + grace_ms
      if ms < 1 then ms = 1 end
      redis.call("PEXPIRE", zkey, ms)
      redis.call("PEXPIRE", hkey, ms)
    end
  end
  local function decision(allowed, h)
    return { allowed, limit, math.max(0, limit - h), 0, -1, 0 }
  end
  if op == "release" or op == "renew" then
    local score = redis.call("ZSCORE", zkey, lease)
    if not score then return decision(0, held), nil end
    if op == "renew" then
      return decision(1, held), function()
        redis.call("ZADD", zkey, now + lease_us, lease)
        refresh_expiry()
      end
    end
    local permits = int_field(hkey, lease, hash_fields(hkey, lease)[1], 0, held)
    local left = held - permits
    return decision(1, left), function()
      redis.call("ZREM", zkey, lease)
      redis.call("HDEL", hkey, lease)
      if left == 0 then redis.call("DEL", zkey, hkey) else redis.call("HSET", hkey, "#", left) end
    end
  end
  local after = held + n
  if after > limit then return decision(0, held), nil end
  if redis.call("ZSCORE", zkey, lease) then fail("args", "lease " .. lease .. " already held") end
  return decision(1, after), function()
    redis.call("ZADD", zkey, now + lease_us, lease)
    redis.call("HSET", hkey, lease, n, "#", after)
    refresh_expiry()
  end
end

local function run()
  local now
  if ARGV[1] == "" then
    local t = redis.call("TIME")
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  else
    now = tonumber(ARGV[1])
  end
  local op = ARGV[2]
  local count = tonumber(ARGV[3])
  local i, k = 4, 1
  local decisions, commits = {}, {}
  local all_allowed = true
  for _ = 1, count do
    local kind, n = ARGV[i], tonumber(ARGV[i + 1])
    i = i + 2
    local decision, commit
    if kind == "gcra" or kind == "token-bucket" then
      local p
      p, i = bucket_params(ARGV, i)
      if kind == "gcra" then
        decision, commit = decide_gcra(KEYS[k], now, n, op, p)
      else
        decision, commit = decide_token_bucket(KEYS[k], now, n, op, p)
      end
      k = k + 1
    elseif kind == "concurrency" then
      local limit, lease = tonumber(ARGV[i]), ARGV[i + 1]
      local lease_us, grace_ms = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
      i = i + 4
      decision, commit =
        decide_concurrency(KEYS[k], KEYS[k + 1], now, n, op, limit, lease, lease_us, grace_ms)
      k = k + 2
    else
      fail("args", "unknown algorithm " .. tostring(kind))
    end
    if decision[1] ~= 1 then all_allowed = false end
    decisions[#decisions + 1] = decision
    commits[#commits + 1] = commit
  end
  if all_allowed and op ~= "peek" then
    for _, commit in ipairs(commits) do commit() end
  end
  local reply = { "OK", now }
  for _, decision in ipairs(decisions) do
    for _, v in ipairs(decision) do reply[#reply + 1] = v end
  end
  return reply
end

local ok, result = pcall(run)
if ok then return result end
if type(result) == "table" and result.sluicegate then
  return { "ERR", result.kind, result.detail }
end
return { "ERR", "script", tostring(type(result) == "table" and result.err or result) }
