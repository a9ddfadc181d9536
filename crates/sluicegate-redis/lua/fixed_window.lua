-- Fixed window. Concatenated after prelude.lua (see src/store.rs).

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
