-- The entry point of one fixed window alone, as one_gcra.lua is of GCRA: ARGV now, op, permits,
-- limit, window_us, grace_ms. Concatenated after prelude.lua and fixed_window.lua (see
-- src/scripts.rs).
local function run_one_fixed_window(KEYS, ARGV)
  local now, op = decision_time(ARGV[1]), ARGV[2]
  return one_reply(now, op, decide_fixed_window(KEYS[1], now, tonumber(ARGV[3]),
    tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])))
end

local function one_fixed_window(KEYS, ARGV)
  return finish(pcall(run_one_fixed_window, KEYS, ARGV))
end
