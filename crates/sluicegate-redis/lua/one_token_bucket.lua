-- The entry point of one token bucket alone, as one_gcra.lua is of GCRA. Concatenated after
-- prelude.lua, bucket_prelude.lua and token_bucket.lua (see src/store.rs).
return finish(pcall(function()
  local now, op = decision_time(), ARGV[2]
  local decision, commit = decide_token_bucket(KEYS[1], now, tonumber(ARGV[5]), op,
    (bucket_params(ARGV, 6)))
  return single_reply(now, op, decision, commit)
end))
