-- The entry point of one fixed window alone, as one_gcra.lua is of GCRA: ARGV now, op,
-- permits, "limit:window_us:grace_ms". Concatenated after prelude.lua and fixed_window.lua
-- (see src/scripts.rs).
local function window_params(list)
  if #list ~= 3 then fail("args", "window parameters") end
  return list
end

-- One fixed-window decision at `now` with parsed parameters by the general path (batch.lua
-- decides through this what its check leaves).
local function one_fixed_window_general(key, now, op, n, p)
  local decision, start, after, until_end = fixed_window_decision(key, now, n, op, p[1], p[2])
  if start == nil then return one_reply(now, op, decision) end
  return one_reply(now, op, decision, write_window, key, start, after, until_end, p[3])
end

local function one_fixed_window_with(key, now, op, n, p)
  if op == "check" then
    local reply = check_alone(fixed_window_check, key, now, n, p)
    if reply ~= nil then return reply end
  end
  return one_fixed_window_general(key, now, op, n, p)
end

local function run_one_fixed_window(KEYS, ARGV)
  return one_fixed_window_with(KEYS[1], decision_time(ARGV[1]), ARGV[2], tonumber(ARGV[3]),
    one_params(ARGV[4], window_params))
end

local one_fixed_window = entry_point(run_one_fixed_window)
