-- Leaky bucket (meter) and leaky queue (nginx). Concatenated after prelude.lua and
-- bucket_prelude.lua (see src/scripts.rs).

-- Leaky bucket as a meter (leaky_bucket.rs). State: the string "l:u:r:d:i" (level ticks,
-- leaked-at pair, d, interval). Parameters as GCRA (the initial pair unused: a missing key is
-- empty).
-- The meter's level at `now` and the pair it is measured at: `now`, or the stored pair if
-- later (a clock gone back drains nothing).
local function leaky_level(key, now, p)
  local level, lu, lr = 0, 0, 0
  local raw_level, u, r, d_old, i_old = read_level(key)
  if raw_level ~= nil then
    level = int_field(key, "l", raw_level, 0, EXACT)
    lu, lr = convert_pair(u, r, d_old, p.d)
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
  return level - math.min(level, drained), now_us, now_r
end

local function decide_leaky_bucket(key, now, n, op, p)
  local level_at, now_us, now_r = leaky_level(key, now, p)
  local after = level_at + n * p.interval
  if after > p.tolerance and op ~= "charge" then
    return bucket_deny(p, level_at, ceil_div(after - p.tolerance, p.d)), nil
  end
  -- A peek pours nothing in: it reports the room at the level now.
  if op == "peek" and after <= p.tolerance then return bucket_peek(p, level_at, after), nil end
  local function commit()
    write_level(key, after, now_us, now_r, p, after + (now_us - now) * p.d + now_r)
  end
  if after <= p.tolerance then return bucket_allow(p, after), commit end
  -- A charge is poured in all the same (leaky_bucket.rs), above the capacity.
  if after >= EXACT then fail("overflow", key .. ": charged too far above the capacity") end
  return bucket_deny(p, after, ceil_div(after + n * p.interval - p.tolerance, p.d)), commit
end

-- nginx limit_req as a queue (leaky_queue.rs): GCRA of burst + 1 permits whose admitted
-- requests wait for the queue beyond no_wait ticks. State as GCRA. Parameters as GCRA, then
-- no_wait.
local function decide_leaky_queue(key, now, n, op, p, no_wait)
  local tat_us, tat_r = read_tat(key, p)
  local queue = ticks_after(key, tat_us, tat_r, now, 0, p.d)
  local queue_after = queue + n * p.interval
  local wait = ceil_div(math.max(0, queue_after - no_wait), p.d)
  local overflow = ceil_div(math.max(0, queue_after - p.tolerance), p.d)
  local too_long = 0
  if op == "reserve" and p.max_wait >= 0 then too_long = math.max(0, wait - p.max_wait) end
  if overflow > 0 or too_long > 0 then
    return bucket_deny(p, queue, math.max(overflow, too_long)), nil
  end
  if op == "peek" then
    -- A peek joins no queue: it reports the room left with the queue as it is.
    local decision = bucket_peek(p, queue, queue_after)
    decision[6] = wait
    return decision, nil
  end
  local decision = bucket_allow(p, queue_after)
  decision[6] = wait
  return decision, function()
    write_tat(key, now, queue_after, p)
  end
end
