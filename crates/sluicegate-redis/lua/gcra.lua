-- GCRA. Concatenated after prelude.lua and bucket_prelude.lua (see src/store.rs).

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
  -- A try-reserve could pass once its wait has shrunk to max_wait.
  local retry = wait
  if op == "reserve" and p.max_wait >= 0 then retry = wait - p.max_wait end
  return bucket_deny(p, debt, retry), nil
end
