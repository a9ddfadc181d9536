-- Token bucket. Concatenated after prelude.lua and bucket_prelude.lua
-- (see src/scripts.rs).

-- Token bucket (token_bucket.rs). State: the string "l:u:r:d:i" (level ticks, negative after
-- reservations; refilled-at pair; d; interval).
-- Parameters as GCRA, with the initial level in place of the initial TAT pair.
local function decide_token_bucket(key, now, n, op, p)
  local full = p.tolerance
  local level, ref_us, ref_r
  local raw_level, u, r, d_old, i_old = read_level(key)
  if raw_level == nil then
    level, ref_us, ref_r = p.init_a, 0, 0
  else
    level = int_field(key, "l", raw_level, -EXACT, EXACT)
    ref_us, ref_r = convert_pair(u, r, d_old, p.d)
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
    write_level(key, after, now_us, now_r, p, debt_after + (now_us - now) * p.d + now_r)
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
  if op == "charge" then
    -- Counted all the same, as GCRA counts it (token_bucket.rs decides as gcra.rs).
    if debt_after >= EXACT then fail("overflow", key .. ": charged too far ahead") end
    return bucket_deny(p, debt_after, ceil_div(debt_after + n * p.interval - p.tolerance, p.d)),
      commit
  end
  -- A try-reserve could pass once its wait has shrunk to max_wait.
  local retry = wait
  if op == "reserve" and p.max_wait >= 0 then retry = wait - p.max_wait end
  return bucket_deny(p, full - level_at, retry), nil
end
