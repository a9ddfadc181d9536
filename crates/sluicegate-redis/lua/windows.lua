-- Window algorithms kept as lists: sliding log (and Redisson's limiter on it), sliding
-- window. Concatenated after prelude.lua (see src/scripts.rs).

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

-- The sliding log's decision over grants (ts, ps): the decision, how many leading grants have
-- left the window, the time the request counts at, and its reset. A peek's remaining is what
-- the window has left now, without the request.
local function sliding_log_decide(ts, ps, now, n, op, limit, window)
  local at = now
  if #ts > 0 then at = math.max(ts[#ts], now) end
  local dead, used = 0, 0
  for j = 1, #ts do
    if ts[j] + window <= at and dead == j - 1 then dead = j else used = used + ps[j] end
  end
  local after = used + n
  if after <= limit then
    local reset = math.max(0, at + window - now)
    local left = limit - after
    if op == "peek" then left = limit - used end
    return { 1, limit, left, reset, -1, 0 }, dead, at, reset
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
local function decide_sliding_log(key, now, n, op, limit, window, grace_ms)
  local ts, ps = read_pairs(key, limit)
  local decision, dead, at, reset = sliding_log_decide(ts, ps, now, n, op, limit, window)
  if decision[1] ~= 1 or op == "peek" then return decision, nil end
  return decision, function()
    append_pair(key, ts, ps, dead, at, n)
    pexpire(key, reset, 1, grace_ms)
  end
end

-- Redisson's RRateLimiter: a rate and interval stored in a config hash (set by try_set_rate
-- or set_rate), enforced as a sliding log, so no interval ever holds more than `rate`
-- permits. State: one hash, a field per client ("" for OVERALL) holding "t,p,t,p,...".
local function decide_redisson(ckey, skey, now, n, op, client, grace_ms)
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
  local decision, dead, at, reset = sliding_log_decide(ts, ps, now, n, op, rate, interval)
  if decision[1] ~= 1 or op == "peek" then return decision, nil end
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
-- A sliding window's slots per window and slots counted: K and K, or 1 and 2 (K = 0, the
-- weighted mode, whose slot is a whole window).
local function window_slots(k)
  if k == 0 then return 1, 2 end
  return k, k
end

-- The slot of time t, floor(t * per / window), without forming the big product.
local function window_slot_of(t, window, per)
  local q, r = idiv(t, window)
  return q * per + (idiv(r * per, window))
end

-- The first microsecond of slot j, ceil(j * window / per), likewise.
local function window_slot_start(j, window, per)
  local a, b = idiv(j, per)
  return a * window + ceil_div(b * window, per)
end

local function decide_sliding_window(key, now, n, op, limit, window, k, grace_ms)
  local per, span = window_slots(k)
  local function slot_of(t) return window_slot_of(t, window, per) end
  local function slot_start(j) return window_slot_start(j, window, per) end
  local function slot_expiry(j) return slot_start(j + span) end
  -- The current slot, how many leading pairs no longer count, and when the request counts.
  local function standing(ss)
    local current = slot_of(now)
    if #ss > 0 then current = math.max(ss[#ss], current) end
    local dead = 0
    for j = 1, #ss do
      if ss[j] + span <= current then dead = j else break end
    end
    return current, dead, math.max(now, slot_start(current))
  end
  -- (allowed, remaining, retry_at) for n permits over the pairs that still count.
  local function weigh(ss, ps, current, dead, at)
    if k > 0 then
      local used = 0
      for j = dead + 1, #ss do used = used + ps[j] end
      if used + n <= limit then return true, limit - used - n, 0 end
      local need = used - (limit - n)
      local freed, fits_at = 0, at
      for j = dead + 1, #ss do
        freed = freed + ps[j]
        fits_at = slot_expiry(ss[j])
        if freed >= need then break end
      end
      return false, math.max(0, limit - used), fits_at
    end
    local prev, curr = 0, 0
    for j = dead + 1, #ss do
      if ss[j] == current then curr = ps[j] else prev = ps[j] end
    end
    local elapsed = at - slot_start(current)
    local cap = limit * window
    local carried = prev * (window - elapsed)
    local with_request = carried + (curr + n) * window
    if with_request <= cap then return true, (idiv(cap - with_request, window)), 0 end
    local remaining = (idiv(math.max(0, cap - (carried + curr * window)), window))
    local excess = with_request - cap
    if prev > 0 then
      local wait = ceil_div(excess, prev)
      if wait < window - elapsed then return false, remaining, at + wait end
    end
    local excess_next = math.max(0, (curr + n) * window - cap)
    local into_next = 0
    if excess_next > 0 then into_next = ceil_div(excess_next, math.max(curr, 1)) end
    return false, remaining, slot_start(current + 1) + into_next
  end
  local function reset_from(ss, dead)
    if #ss > dead then return math.max(0, slot_expiry(ss[#ss]) - now) end
    return 0
  end
  -- Counts pass the limit only through charges (below), up to EXACT.
  local ss, ps = read_pairs(key, EXACT)
  local current, dead, at = standing(ss)
  local allowed, remaining, retry_at = weigh(ss, ps, current, dead, at)
  if allowed then
    local reset = math.max(0, slot_expiry(current) - now)
    -- A peek counts nothing: what is left now is what the grant would leave plus the
    -- request's own permits (exactly, in both modes; sliding_window.rs).
    if op == "peek" then return { 1, limit, remaining + n, reset, -1, 0 }, nil end
    return { 1, limit, remaining, reset, -1, 0 }, function()
      append_pair(key, ss, ps, dead, current, n)
      pexpire(key, reset, 1, grace_ms)
    end
  end
  if op ~= "charge" then
    return { 0, limit, remaining, reset_from(ss, dead), math.max(0, retry_at - now), 0 }, nil
  end
  -- A denied charge is counted all the same; its answer is what the counts with it say.
  local cs, cp = {}, {}
  for j = dead + 1, #ss do cs[#cs + 1], cp[#cp + 1] = ss[j], ps[j] end
  if #cs > 0 and cs[#cs] == current then
    cp[#cp] = cp[#cp] + n
  else
    cs[#cs + 1], cp[#cp + 1] = current, n
  end
  if cp[#cp] >= EXACT then fail("overflow", key .. ": count too large") end
  local c_current, c_dead, c_at = standing(cs)
  local _, c_remaining, c_retry_at = weigh(cs, cp, c_current, c_dead, c_at)
  local reset = reset_from(cs, c_dead)
  return { 0, limit, c_remaining, reset, math.max(0, c_retry_at - now), 0 }, function()
    append_pair(key, ss, ps, dead, current, n)
    pexpire(key, reset, 1, grace_ms)
  end
end
