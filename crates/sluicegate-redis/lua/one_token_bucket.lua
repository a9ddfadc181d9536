-- The entry point of one token bucket alone, as one_gcra.lua is of GCRA. Concatenated after
-- prelude.lua, bucket_prelude.lua and token_bucket.lua (see src/scripts.rs).
local function run_one_token_bucket(KEYS, ARGV)
  local now, op = decision_time(ARGV[1]), ARGV[2]
  return one_reply(now, op, decide_token_bucket(KEYS[1], now, tonumber(ARGV[3]), op,
    one_params(ARGV[4], one_bucket_params)))
end

local function one_token_bucket(KEYS, ARGV)
  return finish(pcall(run_one_token_bucket, KEYS, ARGV))
end
