-- The entry point of one fixed window alone, as one_gcra.lua is of GCRA. Concatenated after
-- prelude.lua and fixed_window.lua (see src/store.rs).
return finish(pcall(function()
  local now, op = decision_time(), ARGV[2]
  local decision, commit = decide_fixed_window(KEYS[1], now, tonumber(ARGV[5]),
    tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8]))
  return single_reply(now, op, decision, commit)
end))
