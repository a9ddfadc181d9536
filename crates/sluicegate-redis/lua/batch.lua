-- Several one-limit decisions in one call (src/batch.rs sends the calls that queue up while
-- earlier ones are in flight): each decided, and charged, in order, exactly as its own call of
-- one_gcra or one_fixed_window would decide it; one decision's error (a corrupt key) is its
-- own reply and leaves the others alone. A call of a Redis Function costs about as much as the
-- work of a decision, so sharing one among many is the cheapest way to more decisions per
-- second. Concatenated after one_gcra.lua and one_fixed_window.lua (see src/scripts.rs).
--
-- ARGV: runs of decisions that share their arguments (the common case: one limiter's checks),
-- six per run: entry ("g": one_gcra, "f": one_fixed_window), now ("" = TIME, read once per
-- call), op, permits, parameters, and how many decisions (keys) the run holds. KEYS: one per
-- decision, in order. Reply: one flat array, six values per decision: the reply its entry
-- point would give ({now, allowed, ...}), or {"ERR", kind, detail, 0, 0, 0}. Flat, because
-- Redis probes every table of a reply for seven special fields: a table per decision cost
-- more than deciding.
local batch_entries = { g = one_gcra_at, f = one_fixed_window_at }

local function batch(KEYS, ARGV)
  if floor == nil then bind_standard() end
  local replies, server_now, k, i = {}, nil, 1, 1
  while ARGV[i] ~= nil do
    local decide, at, op = batch_entries[ARGV[i]], ARGV[i + 1], ARGV[i + 2]
    local n, raw, count = tonumber(ARGV[i + 3]), ARGV[i + 4], tonumber(ARGV[i + 5]) or 0
    local now
    if at == "" then
      if server_now == nil then server_now = decision_time("") end
      now = server_now
    else
      now = tonumber(at)
    end
    for _ = 1, count do
      local reply
      if decide == nil then
        reply = { "ERR", "args", "unknown batch entry " .. tostring(ARGV[i]) }
      else
        reply = finish(pcall(decide, KEYS[k], now, op, n, raw))
      end
      local at_reply = (k - 1) * 6
      for j = 1, 3 do replies[at_reply + j] = reply[j] end
      for j = 4, 6 do replies[at_reply + j] = reply[j] or 0 end
      k = k + 1
    end
    i = i + 6
  end
  return replies
end
