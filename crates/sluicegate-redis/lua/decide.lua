-- The entry point of any set of limits: parses the limits of one call, decides them all,
-- commits all or none. Concatenated after prelude.lua and every algorithm file (see
-- src/scripts.rs).

-- Reads one limit's arguments from ARGV[i] and keys from KEYS[k]; returns a function deciding
-- it for an op, and the next i and k.
local function parse_limit(KEYS, ARGV, now, i, k)
  local kind, n = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  if kind == "gcra" or kind == "token-bucket" or kind == "leaky-bucket" then
    local p
    p, i = bucket_params(ARGV, i)
    local decide = ({
      ["gcra"] = decide_gcra,
      -- A token bucket decides as GCRA does (token_bucket.rs), on the same state.
      ["token-bucket"] = decide_gcra,
      ["leaky-bucket"] = decide_leaky_bucket,
    })[kind]
    local key = KEYS[k]
    return function(op) return decide(key, now, n, op, p) end, i, k + 1
  elseif kind == "leaky-queue" then
    local p
    p, i = bucket_params(ARGV, i)
    local no_wait = tonumber(ARGV[i])
    local key = KEYS[k]
    return function(op) return decide_leaky_queue(key, now, n, op, p, no_wait) end,
      i + 1, k + 1
  elseif kind == "fixed-window" or kind == "sliding-log" then
    local limit, window, grace_ms = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
    local key = KEYS[k]
    if kind == "sliding-log" then
      return function(op) return decide_sliding_log(key, now, n, op, limit, window, grace_ms) end,
        i + 3, k + 1
    end
    return function(op) return decide_fixed_window(key, now, n, op, limit, window, grace_ms) end,
      i + 3, k + 1
  elseif kind == "sliding-window" then
    local limit, window = tonumber(ARGV[i]), tonumber(ARGV[i + 1])
    local buckets, grace_ms = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    local key = KEYS[k]
    return function(op)
      return decide_sliding_window(key, now, n, op, limit, window, buckets, grace_ms)
    end, i + 4, k + 1
  elseif kind == "redisson" then
    local client, grace_ms = ARGV[i], tonumber(ARGV[i + 1])
    local ckey, skey = KEYS[k], KEYS[k + 1]
    return function(op) return decide_redisson(ckey, skey, now, n, op, client, grace_ms) end,
      i + 2, k + 2
  elseif kind == "concurrency" then
    local limit, lease = tonumber(ARGV[i]), ARGV[i + 1]
    local lease_us, grace_ms = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3])
    local zkey, hkey = KEYS[k], KEYS[k + 1]
    return function(op)
      return decide_concurrency(zkey, hkey, now, n, op, limit, lease, lease_us, grace_ms)
    end, i + 4, k + 2
  end
  fail("args", "unknown algorithm " .. tostring(kind))
end

-- `reply` with each decision's numbers appended, in order.
local function append_decisions(reply, decisions)
  for _, decision in ipairs(decisions) do
    for _, v in ipairs(decision) do reply[#reply + 1] = v end
  end
  return reply
end

local function run(KEYS, ARGV)
  local now = decision_time(ARGV[1])
  local op = ARGV[2]
  local count = tonumber(ARGV[3])
  local i, k = 4, 1
  local deciders, decisions, commits = {}, {}, {}
  local all_allowed = true
  for j = 1, count do
    deciders[j], i, k = parse_limit(KEYS, ARGV, now, i, k)
    decisions[j], commits[j] = deciders[j](op)
    if decisions[j][1] ~= 1 then all_allowed = false end
  end
  if op == "charge" then
    -- Every limit counts the request, allowed or not (the core's decide_together).
    for j = 1, count do
      if commits[j] ~= nil then commits[j]() end
    end
  elseif all_allowed and op ~= "peek" then
    for j = 1, count do commits[j]() end
  elseif not all_allowed and op ~= "peek" then
    -- Nothing is charged: the limits that would have allowed report a peek, what they have
    -- now (as the core's decide_together does: a reservation that went through would say
    -- otherwise). The ones that denied already report what they have now.
    for j = 1, count do
      if decisions[j][1] == 1 then decisions[j] = deciders[j]("peek") end
    end
  end
  return append_decisions({ "OK", now }, decisions)
end

local decide_all = entry_point(run)
