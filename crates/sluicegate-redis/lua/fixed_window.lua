-- Fixed window. Concatenated after prelude.lua (see src/scripts.rs).

-- Fixed window (fixed_window.rs). State: the string "s:c" (window start us, count).
-- Parameters: limit, window_us, grace_ms.
local function decide_fixed_window(key, now, n, op, limit, window, grace_ms)
  local raw = get_state(key)
  local _, into = idiv(now, window)
  local start, count = now - into, 0
  if raw ~= false then
    -- A plain find and two subs cost less than a pattern with captures.
    local colon = string.find(raw, ":", 1, true)
    if colon == nil then bad_state(key, raw) end
    local s = int_field(key, "s", string.sub(raw, 1, colon - 1), 0, 2 ^ 53)
    local c = int_field(key, "c", string.sub(raw, colon + 1), 0, EXACT)
    if c > 0 and s >= start then start, count = s, c end
  end
  local until_end = math.max(0, start + window - now)
  local after = count + n
  if after > limit and op ~= "charge" then
    return { 0, limit, math.max(0, limit - count), until_end, until_end, 0 }, nil
  end
  local function commit()
    set_state(key, string.format("%d:%d", start, after), until_end, 1, grace_ms)
  end
  if after <= limit then return { 1, limit, limit - after, until_end, -1, 0 }, commit end
  -- A charge is counted past the limit (fixed_window.rs); the next window starts empty all
  -- the same.
  if after >= EXACT then fail("overflow", key .. ": count too large") end
  return { 0, limit, 0, until_end, until_end, 0 }, commit
end
