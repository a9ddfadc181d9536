-- The entry point of one GCRA limit alone (RedisLimiter's common case): decide.lua's
-- arguments (a count of 1) and reply, in a script without the other algorithms, since every
-- call builds the closures of everything a script defines. Concatenated after prelude.lua,
-- bucket_prelude.lua and gcra.lua (see src/store.rs).
return finish(pcall(function()
  local now, op = decision_time(), ARGV[2]
  local decision, commit = decide_gcra(KEYS[1], now, tonumber(ARGV[5]), op,
    (bucket_params(ARGV, 6)))
  return single_reply(now, op, decision, commit)
end))
