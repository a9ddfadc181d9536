-- GCRA. Concatenated after prelude.lua and bucket_prelude.lua (see src/scripts.rs).

-- GCRA (gcra.rs). State: the TAT (see read_tat).
-- Parameters: d, interval, tolerance, burst, initial TAT us, initial TAT remainder,
-- max_wait_us (-1: none), grace_ms.
-- The decision, and the debt a charge would leave (nil if nothing is to be charged).
local function gcra_decision(key, now, n, op, p)
  local tat_us, tat_r = read_tat(key, p)
  local debt = ticks_after(key, tat_us, tat_r, now, 0, p.d)
  local debt_after = debt + n * p.interval
  if debt_after <= p.tolerance then
    -- A peek takes nothing: it reports what the bucket holds now.
    if op == "peek" then return bucket_peek(p, debt, debt_after), nil end
    return bucket_allow(p, debt_after), debt_after
  end
  local wait = ceil_div(debt_after - p.tolerance, p.d)
  if op == "reserve" and (p.max_wait < 0 or wait <= p.max_wait) then
    if debt_after >= EXACT then fail("overflow", key .. ": reservation too far ahead") end
    local decision = bucket_allow(p, debt_after)
    decision[6] = wait
    return decision, debt_after
  end
  if op == "charge" then
    -- Counted all the same (gcra.rs): the same request fits once the debt has shrunk by
    -- the overdraft it would add.
    if debt_after >= EXACT then fail("overflow", key .. ": charged too far ahead") end
    return bucket_deny(p, debt_after, ceil_div(debt_after + n * p.interval - p.tolerance, p.d)),
      debt_after
  end
  -- A try-reserve could pass once its wait has shrunk to max_wait.
  local retry = wait
  if op == "reserve" and p.max_wait >= 0 then retry = wait - p.max_wait end
  return bucket_deny(p, debt, retry), nil
end

-- What a check of `n` permits finds on a missing key whose initial TAT has passed (a missing
-- key's TAT is the one of a limiter made at time 0): the debt after it (`fresh_after`, false:
-- not admitted), the key's time to live, and the permits left. The same for every missing key
-- of the same parameters, so worked out once per parameters and permits and kept in `p`
-- (one_params keeps each parsed `p` from call to call); the TAT's text (`fresh_text`) once per
-- run of a batch, which decides at one time (`fresh_at`). The check reads them from `p`
-- itself: a Lua call per check cost more than a field.
local function gcra_fresh(p, n)
  local after = n * p.interval
  if after > p.tolerance or after >= EXACT then
    p.fresh_after = false
  else
    p.fresh_after, p.fresh_ttl = after, expiry_ms(after, 1, p.grace_ms)
    p.fresh_left = (idiv(p.tolerance - after, p.interval))
  end
  p.fresh_n, p.fresh_at = n, nil
end

-- gcra_decision and its write for the common case alone: a check in whole microseconds
-- (d = 1) of a key missing or holding one integer, with the same answer. The general path's
-- calls and tables were a third of a decision's cost in Redis. The reply as batch.lua and
-- check_alone (prelude.lua) take it: allowed, remaining, reset_us, retry_us, wait_us, and its
-- reset again (the debt after an allowed check, before a denied one), what a one-value reply
-- holds (the rest follows from it: remaining is (tolerance - reset) / interval, a denial's
-- retry reset + n * interval - tolerance); nothing for any other case (the general path
-- decides it, and names what is wrong with a corrupt key).
local function gcra_check_whole_us(key, now, n, p)
  if p.d ~= 1 then return nil end
  local tolerance, tat, raw = p.tolerance, p.init_a, nil
  -- A missing key holds the initial TAT: written by the read that finds it missing when that
  -- admits the check (see key_misses); a key there is read, and left as it was.
  local fresh_after = false
  if key_misses > 0 and tat <= now then
    if p.fresh_n ~= n then gcra_fresh(p, n) end
    fresh_after = p.fresh_after
    if fresh_after and p.fresh_at ~= now then
      p.fresh_at, p.fresh_text = now, format("%d", now + fresh_after)
    end
  end
  if fresh_after then
    raw = redis_pcall("SET", key, p.fresh_text, "NX", "GET", "PX", p.fresh_ttl)
  else
    raw = redis_pcall("GET", key)
  end
  if raw ~= false then
    if key_misses > -8 then key_misses = key_misses - 1 end
  else
    if key_misses < 8 then key_misses = key_misses + 1 end
    if fresh_after then return 1, p.fresh_left, fresh_after, -1, 0, fresh_after end
  end
  if raw ~= false then
    tat = to_number(raw)
    if tat == nil or tat ~= floor(tat) or tat < 0 or tat > 2 ^ 53 then return nil end
  end
  local debt = 0
  if tat > now then
    debt = tat - now
    if debt >= EXACT then return nil end
  end
  local debt_after = debt + n * p.interval
  if debt_after <= tolerance then
    local ttl = expiry_ms(debt_after, 1, p.grace_ms)
    redis_call("SET", key, format("%d", now + debt_after), "PX", ttl)
    return 1, (idiv(tolerance - debt_after, p.interval)), debt_after, -1, 0, debt_after
  end
  -- A charge may have left a debt past the tolerance.
  local left = tolerance - debt
  if left < 0 then left = 0 end
  return 0, (idiv(left, p.interval)), debt, debt_after - tolerance, 0, debt
end

-- GCRA as decide.lua takes every algorithm: the decision and its commit (nil if none).
local function decide_gcra(key, now, n, op, p)
  local decision, debt_after = gcra_decision(key, now, n, op, p)
  if debt_after == nil then return decision, nil end
  return decision, function() write_tat(key, now, debt_after, p) end
end
