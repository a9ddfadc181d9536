-- Fixed window. Concatenated after prelude.lua (see src/scripts.rs).

-- A window's start as the text its state begins with ("start:"): a key counted in the
-- current window already (the common find: every check of a key seen before in its window)
-- is read by comparing its start as text, and written by joining its new count to that text,
-- instead of parsing and formatting both numbers.
local window_prefix = formatted_once("%d:", 256)

-- Lua writes a number it joins to a string with 14 significant digits: a count below this is
-- joined exactly.
local JOINED_EXACTLY = 1e14

-- The state of a window that started at `start` holding `count`.
local function window_state(start, count)
  if count < JOINED_EXACTLY then return window_prefix(start) .. count end
  return format("%d:%d", start, count)
end

-- Writes a window that started at `start` holding `count`, living until its end.
local function write_window(key, start, count, until_end, grace_ms)
  set_state(key, window_state(start, count), until_end, 1, grace_ms)
end

-- Fixed window (fixed_window.rs). State: the string "s:c" (window start us, count).
-- Parameters: limit, window_us, grace_ms.
-- The decision and, if it charges, the window's start, its count after, and the time until
-- it ends (what write_window stores); nothing more if nothing is to be charged.
local function fixed_window_decision(key, now, n, op, limit, window)
  local raw = get_state(key)
  local _, into = idiv(now, window)
  local start, count = now - into, 0
  if raw ~= false then
    local prefix, s, c = window_prefix(start), start, nil
    if string_sub(raw, 1, #prefix) == prefix then
      c = int_field(key, "c", string_sub(raw, #prefix + 1), 0, EXACT)
    else
      -- A plain find and two subs cost less than a pattern with captures.
      local colon = string_find(raw, ":", 1, true)
      if colon == nil then bad_state(key, raw) end
      s = int_field(key, "s", string_sub(raw, 1, colon - 1), 0, 2 ^ 53)
      c = int_field(key, "c", string_sub(raw, colon + 1), 0, EXACT)
    end
    if c > 0 and s >= start then start, count = s, c end
  end
  local until_end = start + window - now
  if until_end < 0 then until_end = 0 end
  local after = count + n
  if after > limit and op ~= "charge" then
    local left = limit - count
    if left < 0 then left = 0 end
    return { 0, limit, left, until_end, until_end, 0 }
  end
  -- A peek counts nothing: it reports what the window has left now.
  if after <= limit and op == "peek" then return { 1, limit, limit - count, until_end, -1, 0 } end
  if after <= limit then
    return { 1, limit, limit - after, until_end, -1, 0 }, start, after, until_end
  end
  -- A charge is counted past the limit (fixed_window.rs); the next window starts empty all
  -- the same.
  if after >= EXACT then fail("overflow", key .. ": count too large") end
  return { 0, limit, 0, until_end, until_end, 0 }, start, after, until_end
end

-- What a check of `n` permits writes to a missing key at `now` (the window that began at
-- `start`), and the key's time to live, as text (`fresh_text`, `fresh_ttl`): the same for
-- every missing key of a batch's run, which decides at one time, so made once per run and
-- kept in `p` (one_params keeps it from call to call). The check reads them from `p` itself.
local function window_fresh(p, now, start, n)
  p.fresh_at, p.fresh_n = now, n
  p.fresh_text, p.fresh_ttl = window_state(start, n), expiry_ms(start + p[2] - now, 1, p[3])
end

-- fixed_window_decision and its write for a check alone, with the same answer (see
-- gcra_check_whole_us), the parameters as one_fixed_window.lua takes them ({limit,
-- window_us, grace_ms}): allowed, remaining, reset_us, retry_us, wait_us, and for a check
-- that counts in the window `now` falls in its remaining again, what a one-value
-- reply holds (its reset, and a denial's retry, are the time left in that window); nothing
-- for a corrupt key (the general path names what is wrong).
local function fixed_window_check(key, now, n, p)
  local limit, window = p[1], p[2]
  -- The window `now` falls in and its start as text, found once per time (a batch's run
  -- decides at one) and kept in `p`: a field read costs less than a call, on every check.
  if p.start_at ~= now then
    local _, into = idiv(now, window)
    p.start_at, p.start_of = now, now - into
    p.prefix = window_prefix(now - into)
  end
  local start, count = p.start_of, 0
  local raw
  -- A missing key is an empty window: written by the read that finds it missing when that
  -- admits the check (see key_misses); a key there is read, and left as it was.
  local written = key_misses > 0 and n <= limit
  if written then
    if p.fresh_at ~= now or p.fresh_n ~= n then window_fresh(p, now, start, n) end
    raw = redis_pcall("SET", key, p.fresh_text, "NX", "GET", "PX", p.fresh_ttl)
  else
    raw = redis_pcall("GET", key)
  end
  if raw ~= false then
    if key_misses > -8 then key_misses = key_misses - 1 end
  else
    if key_misses < 8 then key_misses = key_misses + 1 end
    if written then return 1, limit - n, start + window - now, -1, 0, limit - n end
  end
  local prefix = p.prefix
  if raw ~= false then
    if type_of(raw) ~= "string" then return nil end
    local s, c
    if string_sub(raw, 1, #prefix) == prefix then
      s, c = start, to_number(string_sub(raw, #prefix + 1))
    else
      local colon = string_find(raw, ":", 1, true)
      if colon == nil then return nil end
      s, c = to_number(string_sub(raw, 1, colon - 1)), to_number(string_sub(raw, colon + 1))
      if s == nil or s % 1 ~= 0 or s < 0 or s > 2 ^ 53 then return nil end
    end
    if c == nil or c % 1 ~= 0 or c < 0 or c > EXACT then return nil end
    if c > 0 and s >= start then start, count = s, c end
  end
  local until_end = start + window - now
  if until_end < 0 then until_end = 0 end
  local after = count + n
  -- Counted in the window `now` falls in (not one ahead of it): its one-value reply says so.
  local current = start == p.start_of
  if after > limit then
    local left = limit - count
    if left < 0 then left = 0 end
    if current then return 0, left, until_end, until_end, 0, left end
    return 0, left, until_end, until_end, 0
  end
  -- window_state, without its calls when the state is this window's.
  local value
  if current and after < JOINED_EXACTLY then
    value = prefix .. after
  else
    value = window_state(start, after)
  end
  if count > 0 then
    -- The key holds this window already, and lives until its end: every write of a window
    -- sets the same end (a time to live from its own now to the window's end).
    redis_call("SET", key, value, "KEEPTTL")
  else
    redis_call("SET", key, value, "PX", expiry_ms(until_end, 1, p[3]))
  end
  if current then return 1, limit - after, until_end, -1, 0, limit - after end
  return 1, limit - after, until_end, -1, 0
end

-- The fixed window as decide.lua takes every algorithm: the decision and its commit.
local function decide_fixed_window(key, now, n, op, limit, window, grace_ms)
  local decision, start, after, until_end = fixed_window_decision(key, now, n, op, limit, window)
  if start == nil then return decision, nil end
  return decision, function() write_window(key, start, after, until_end, grace_ms) end
end
