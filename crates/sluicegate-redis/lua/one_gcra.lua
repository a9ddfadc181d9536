-- The entry point of one GCRA limit alone (RedisLimiter's common case), taking fewer arguments
-- than decide.lua: ARGV now ("" = TIME), op, permits, then GCRA's parameters as one string
-- (see one_params); KEYS the key. Reply: see one_reply (prelude.lua), or for a check whose
-- reply comes down to one value, {now, value} (see compact_of). Concatenated after
-- prelude.lua, bucket_prelude.lua and gcra.lua (see src/scripts.rs): as an EVALSHA script,
-- without the other algorithms, since every call of a script builds the closures of
-- everything it defines.

-- One GCRA decision at `now` with parsed parameters by the general path (batch.lua decides
-- through this what its check leaves).
local function one_gcra_general(key, now, op, n, p)
  local decision, debt_after = gcra_decision(key, now, n, op, p)
  if debt_after == nil then return one_reply(now, op, decision) end
  return one_reply(now, op, decision, write_tat, key, now, debt_after, p)
end

local function one_gcra_with(key, now, op, n, p)
  if op == "check" then
    local reply = check_alone(gcra_check_whole_us, key, now, n, p)
    if reply ~= nil then return reply end
  end
  return one_gcra_general(key, now, op, n, p)
end

local function run_one_gcra(KEYS, ARGV)
  return one_gcra_with(KEYS[1], decision_time(ARGV[1]), ARGV[2], tonumber(ARGV[3]),
    one_params(ARGV[4], one_bucket_params))
end

local one_gcra = entry_point(run_one_gcra)
