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

-- Leaky bucket as a meter (leaky_bucket.rs). State: hash {l = level ticks, u, r = leaked-at
-- pair, d, i}. Parameters as GCRA (the initial pair unused: a missing key is empty).
local function decide_leaky_bucket(key, now, n, op, p)
  local f = hash_fields(key, "l", "u", "r", "d", "i")
  local level, lu, lr = 0, 0, 0
  if f[1] ~= false then
    local d_old = int_field(key, "d", f[4], 1, 1024)
    local i_old = int_field(key, "i", f[5], 1, EXACT)
    level = int_field(key, "l", f[1], 0, EXACT)
    lu = int_field(key, "u", f[2], 0, 2 ^ 53)
    lr = int_field(key, "r", f[3], 0, d_old - 1)
    lu, lr = convert_pair(lu, lr, d_old, p.d)
    if d_old ~= p.d or i_old ~= p.interval then
      -- Other parameters: keep the time until empty (rounded up), not the level.
      level = math.min(ceil_div(level, d_old) * p.d, EXACT)
    end
  end
  local now_us, now_r = now, 0
  local drained
  if lu > now or (lu == now and lr > 0) then
    now_us, now_r = lu, lr
    drained = 0
  elseif now - lu > ceil_div(level, p.d) + 1 then
    drained = level
  else
    drained = (now - lu) * p.d - lr
  end
  local level_at = level - math.min(level, drained)
  local after = level_at + n * p.interval
  if after <= p.tolerance then
    return bucket_allow(p, after), function()
      redis.call("HSET", key, "l", after, "u", now_us, "r", now_r, "d", p.d, "i", p.interval)
      pexpire(key, after + (now_us - now) * p.d + now_r, p.d, p.grace_ms)
    end
  end
  return bucket_deny(p, level_at, ceil_div(after - p.tolerance, p.d)), nil
end

-- nginx limit_req as a queue (leaky_queue.rs): GCRA of burst + 1 permits whose admitted
-- requests wait for the queue beyond no_wait ticks. State as GCRA. Parameters as GCRA, then
-- no_wait.
local function decide_leaky_queue(key, now, n, op, p, no_wait)
  local f = hash_fields(key, "t", "r", "d")
  local tat_us, tat_r = p.init_a, p.init_b
  if f[1] ~= false then
    local d_old = int_field(key, "d", f[3], 1, 1024)
    tat_us = int_field(key, "t", f[1], 0, 2 ^ 53)
    tat_r = int_field(key, "r", f[2], 0, d_old - 1)
    tat_us, tat_r = convert_pair(tat_us, tat_r, d_old, p.d)
  end
  local queue = ticks_after(key, tat_us, tat_r, now, 0, p.d)
  local queue_after = queue + n * p.interval
  local wait = ceil_div(math.max(0, queue_after - no_wait), p.d)
  local overflow = ceil_div(math.max(0, queue_after - p.tolerance), p.d)
  local too_long = 0
  if op == "reserve" and p.max_wait >= 0 then too_long = math.max(0, wait - p.max_wait) end
  if overflow > 0 or too_long > 0 then
    return bucket_deny(p, queue, math.max(overflow, too_long)), nil
  end
  local decision = bucket_allow(p, queue_after)
  decision[6] = wait
  return decision, function()
    local q, r = idiv(queue_after, p.d)
    redis.call("HSET", key, "t", now + q, "r", r, "d", p.d)
    pexpire(key, queue_after, p.d, p.grace_ms)
  end
end

-- Fixed window (fixed_window.rs). State: hash {s = window start us, c = count}.
-- Parameters: limit, window_us, grace_ms.
local function decide_fixed_window(key, now, n, limit, window, grace_ms)
  local f = hash_fields(key, "s", "c")
  local _, into = idiv(now, window)
  local start, count = now - into, 0
  if f[1] ~= false then
    local s = int_field(key, "s", f[1], 0, 2 ^ 53)
    local c = int_field(key, "c", f[2], 0, EXACT)
    if c > 0 and s >= start then start, count = s, c end
  end
  local until_end = math.max(0, start + window - now)
  local after = count + n
  if after <= limit then
    return { 1, limit, limit - after, until_end, -1, 0 }, function()
      redis.call("HSET", key, "s", start, "c", after)
      pexpire(key, until_end, 1, grace_ms)
    end
  end
  return { 0, limit, math.max(0, limit - count), until_end, until_end, 0 }, nil
end

-- A list of (time or slot, permits) pairs, oldest first, strictly increasing.
local function read_pairs(key, limit)
  local ok, raw = pcall(redis.call, "LRANGE", key, 0, -1)
  if not ok then fail("corrupt", key .. ": " .. tostring(raw.err or raw)) end
  if #raw % 2 ~= 0 then fail("corrupt", key .. " has an odd length") end
  local at, ps = {}, {}
  for j = 1, #raw, 2 do
    local t = int_field(key, "entry", raw[j], 0, 2 ^ 53)
    if #at > 0 and t <= at[#at] then fail("corrupt", key .. " entries out of order") end
    at[#at + 1] = t
    ps[#ps + 1] = int_field(key, "permits", raw[j + 1], 1, limit)
  end
  return at, ps
end

-- Drops the first `dead` pairs and adds n permits at `t` (merging with the last pair).
local function append_pair(key, at, ps, dead, t, n)
  if dead > 0 then redis.call("LTRIM", key, 2 * dead, -1) end
  if #at > dead and at[#at] == t then
    redis.call("LSET", key, -1, ps[#ps] + n)
  else
    redis.call("RPUSH", key, t, n)
  end
end

-- Sliding log (sliding_log.rs). State: list [t1, p1, t2, p2, ...] of grants.
-- Parameters: limit, window_us, grace_ms.
-- The sliding log's decision over grants (ts, ps): the decision, how many leading grants have
-- left the window, the time the request counts at, and its reset.
local function sliding_log_decide(ts, ps, now, n, limit, window)
  local at = now
  if #ts > 0 then at = math.max(ts[#ts], now) end
  local dead, used = 0, 0
  for j = 1, #ts do
    if ts[j] + window <= at and dead == j - 1 then dead = j else used = used + ps[j] end
  end
  local after = used + n
  if after <= limit then
    local reset = math.max(0, at + window - now)
    return { 1, limit, limit - after, reset, -1, 0 }, dead, at, reset
  end
  local need = used - (limit - n)
  local freed, fits_at = 0, at
  for j = dead + 1, #ts do
    freed = freed + ps[j]
    fits_at = ts[j] + window
    if freed >= need then break end
  end
  local newest = at
  if #ts > 0 then newest = ts[#ts] + window end
  return { 0, limit, math.max(0, limit - used), math.max(0, newest - now),
    math.max(0, fits_at - now), 0 }, dead, at, 0
end

-- Sliding log (sliding_log.rs). State: list [t1, p1, t2, p2, ...] of grants.
-- Parameters: limit, window_us, grace_ms.
local function decide_sliding_log(key, now, n, limit, window, grace_ms)
  local ts, ps = read_pairs(key, limit)
  local decision, dead, at, reset = sliding_log_decide(ts, ps, now, n, limit, window)
  if decision[1] ~= 1 then return decision, nil end
  return decision, function()
    append_pair(key, ts, ps, dead, at, n)
    pexpire(key, reset, 1, grace_ms)
  end
end

-- Redisson's RRateLimiter: a rate and interval stored in a config hash (set by try_set_rate
-- or set_rate), enforced as a sliding log, so no interval ever holds more than `rate`
-- permits. State: one hash, a field per client ("" for OVERALL) holding "t,p,t,p,...".
local function decide_redisson(ckey, skey, now, n, client, grace_ms)
  local f = hash_fields(ckey, "rate", "interval", "type")
  if f[1] == false and f[2] == false and f[3] == false then
    fail("unconfigured", ckey .. ": no rate set (try_set_rate first)")
  end
  local rate = int_field(ckey, "rate", f[1], 1, 2 ^ 50)
  local interval = int_field(ckey, "interval", f[2], 1, 2 ^ 50)
  local field = ""
  if f[3] == "per_client" then
    field = client
  elseif f[3] ~= "overall" then
    fail("corrupt", ckey .. " field type = " .. tostring(f[3]))
  end
  if n > rate then fail("capacity", string.format("%.0f %.0f", n, rate)) end
  local raw = hash_fields(skey, field)[1]
  local ts, ps = {}, {}
  if raw ~= false then
    local values = {}
    for v in string.gmatch(raw, "[^,]+") do values[#values + 1] = v end
    if #values % 2 ~= 0 then fail("corrupt", skey .. " log has an odd length") end
    for j = 1, #values, 2 do
      local t = int_field(skey, "entry", values[j], 0, 2 ^ 53)
      if #ts > 0 and t <= ts[#ts] then fail("corrupt", skey .. " entries out of order") end
      ts[#ts + 1] = t
      ps[#ps + 1] = int_field(skey, "permits", values[j + 1], 1, rate)
    end
  end
  local decision, dead, at, reset = sliding_log_decide(ts, ps, now, n, rate, interval)
  if decision[1] ~= 1 then return decision, nil end
  return decision, function()
    local out = {}
    for j = dead + 1, #ts do
      local p = ps[j]
      if j == #ts and ts[j] == at then p = p + n end
      out[#out + 1] = string.format("%.0f,%.0f", ts[j], p)
    end
    if #ts == dead or ts[#ts] ~= at then out[#out + 1] = string.format("%.0f,%.0f", at, n) end
    redis.call("HSET", skey, field, table.concat(out, ","))
    local ms = ceil_div(reset, 1000) + grace_ms
    if redis.call("PTTL", skey) < ms then redis.call("PEXPIRE", skey, math.max(ms, 1)) end
  end
end

-- Sliding window (sliding_window.rs), K slots or (K = 0) Cloudflare's weighted two windows.
-- State: list [slot1, p1, slot2, p2, ...]. Parameters: limit, window_us, K, grace_ms.
local function decide_sliding_window(key, now, n, limit, window, k, grace_ms)
  local per, span = k, k
  if k == 0 then per, span = 1, 2 end
  -- floor(t * per / window) and ceil(j * window / per) without forming the big products.
  local function slot_of(t)
    local q, r = idiv(t, window)
    return q * per + (idiv(r * per, window))
  end
  local function slot_start(j)
    local a, b = idiv(j, per)
    return a * window + ceil_div(b * window, per)
  end
  local function slot_expiry(j) return slot_start(j + span) end
  local ss, ps = read_pairs(key, limit)
  local current = slot_of(now)
  if #ss > 0 then current = math.max(ss[#ss], current) end
  local dead = 0
  for j = 1, #ss do
    if ss[j] + span <= current then dead = j else break end
  end
  local at = math.max(now, slot_start(current))
  local allowed, remaining, retry_at
  if k > 0 then
    local used = 0
    for j = dead + 1, #ss do used = used + ps[j] end
    if used + n <= limit then
      allowed, remaining, retry_at = true, limit - used - n, 0
    else
      local need = used - (limit - n)
      local freed, fits_at = 0, at
      for j = dead + 1, #ss do
        freed = freed + ps[j]
        fits_at = slot_expiry(ss[j])
        if freed >= need then break end
      end
      allowed, remaining, retry_at = false, math.max(0, limit - used), fits_at
    end
  else
    local prev, curr = 0, 0
    for j = dead + 1, #ss do
      if ss[j] == current then curr = ps[j] else prev = ps[j] end
    end
    local elapsed = at - slot_start(current)
    local cap = limit * window
    local carried = prev * (window - elapsed)
    local with_request = carried + (curr + n) * window
    if with_request <= cap then
      allowed, remaining, retry_at = true, (idiv(cap - with_request, window)), 0
    else
      allowed = false
      remaining = (idiv(math.max(0, cap - (carried + curr * window)), window))
      local excess = with_request - cap
      local wait = nil
      if prev > 0 then
        wait = ceil_div(excess, prev)
        if wait >= window - elapsed then wait = nil end
      end
      if wait then
        retry_at = at + wait
      else
        local excess_next = math.max(0, (curr + n) * window - cap)
        local into_next = 0
        if excess_next > 0 then into_next = ceil_div(excess_next, math.max(curr, 1)) end
        retry_at = slot_start(current + 1) + into_next
      end
    end
  end
  if not allowed then
    local reset = 0
    if #ss > dead then reset = math.max(0, slot_expiry(ss[#ss]) - now) end
    return { 0, limit, remaining, reset, math.max(0, retry_at - now), 0 }, nil
  end
  local reset = math.max(0, slot_expiry(current) - now)
  return { 1, limit, remaining, reset, -1, 0 }, function()
    append_pair(key, ss, ps, dead, current, n)
    pexpire(key, reset, 1, grace_ms)
  end
end

-- Reads one limit's arguments from ARGV[i] and keys from KEYS[k]; returns a function deciding
-- it for an op, and the next i and k.
local function parse_limit(now, i, k)
  local kind, n = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  if kind == "gcra" or kind == "token-bucket" or kind == "leaky-bucket" then
    local p
    p, i = bucket_params(ARGV, i)
    local decide = ({
      ["gcra"] = decide_gcra,
      ["token-bucket"] = decide_token_bucket,
      ["leaky-bucket"] = decide_leaky_bucket,
    })[kind]
    return function(op) return decide(KEYS[k], now, n, op, p) end, i, k + 1
  elseif kind == "leaky-queue" then
    local p
    p, i = bucket_params(ARGV, i)
    local no_wait = tonumber(ARGV[i])
    return function(op) return decide_leaky_queue(KEYS[k], now, n, op, p, no_wait) end,
      i + 1, k + 1
  elseif kind == "fixed-window" or kind == "sliding-log" then
    local limit, window, grace_ms = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local decide = decide_fixed_window
    if kind == "sliding-log" then decide = decide_sliding_log end
    return function() return decide(KEYS[k], now, n, limit, window, grace_ms) end, i + 3, k + 1
  elseif kind == "sliding-window" then
    local limit, window = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    local buckets, grace_ms = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    return function()
      return decide_sliding_window(KEYS[k], now, n, limit, window, buckets, grace_ms)
    end, i + 4, k + 1
  elseif kind == "redisson" then
    local client, grace_ms = ARGV[i], tonumber(ARGV[i + 1])
    local ckey, skey = KEYS[k], KEYS[k + 1]
    return function() return decide_redisson(ckey, skey, now, n, client, grace_ms) end,
      i + 2, k + 2
  elseif kind == "concurrency" then
    local limit, lease = tonumber(ARGV[i]), ARGV[i + 1]
    local lease_us, grace_ms = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    local zkey, hkey = KEYS[k], KEYS[k + 1]
    return function(op)
      return decide_concurrency(zkey, hkey, now, n, op, limit, lease, lease_us, grace_ms)
    end, i + 4, k + 2
  end
  fail("args", "unknown algorithm " .. tostring(kind))
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
  local deciders, decisions, commits = {}, {}, {}
  local all_allowed = true
  for j = 1, count do
    deciders[j], i, k = parse_limit(now, i, k)
    decisions[j], commits[j] = deciders[j](op)
    if decisions[j][1] ~= 1 then all_allowed = false end
  end
  if all_allowed and op ~= "peek" then
    for j = 1, count do commits[j]() end
  elseif not all_allowed and op ~= "peek" then
    -- The limits that would have allowed report what they have left, uncharged (as the
    -- core's decide_together does: a reservation that went through would say otherwise).
    for j = 1, count do
      if decisions[j][1] == 1 then decisions[j] = deciders[j]("peek") end
    end
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
