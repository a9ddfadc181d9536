-- The entry point of one GCRA limit alone (RedisLimiter's common case), taking fewer arguments
-- than decide.lua: ARGV now ("" = TIME), op, permits, then GCRA's parameters as one string
-- (see one_params); KEYS the key. Reply: see one_reply (prelude.lua). Concatenated after
-- prelude.lua, bucket_prelude.lua and gcra.lua (see src/scripts.rs): as an EVALSHA script,
-- without the other algorithms, since every call of a script builds the closures of
-- everything it defines.
local function run_one_gcra(KEYS, ARGV)
  local now, op = decision_time(ARGV[1]), ARGV[2]
  return one_reply(now, op, decide_gcra(KEYS[1], now, tonumber(ARGV[3]), op,
    one_params(ARGV[4], one_bucket_params)))
end

local function one_gcra(KEYS, ARGV) return finish(pcall(run_one_gcra, KEYS, ARGV)) end
