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

-- GCRA as decide.lua takes every algorithm: the decision and its commit (nil if none).
local function decide_gcra(key, now, n, op, p)
  local decision, debt_after = gcra_decision(key, now, n, op, p)
  if debt_after == nil then return decision, nil end
  return decision, function() write_tat(key, now, debt_after, p) end
end
