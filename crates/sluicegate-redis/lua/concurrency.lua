-- Concurrency limits as leases. Concatenated after prelude.lua (see src/scripts.rs).

-- Concurrency (concurrency.rs) with leases. KEYS: a sorted set of lease ids scored by their
-- expiry (us) and a hash {lease id = permits, "#" = permits held}. Parameters: limit, lease
-- id, lease_us, grace_ms. Ops: check/peek take, release gives a lease back, renew extends it.
local function decide_concurrency(zkey, hkey, now, n, op, limit, lease, lease_us, grace_ms)
  local held_raw = hash_fields(hkey, "#")[1]
  local held = 0
  if held_raw ~= false then held = int_field(hkey, "#", held_raw, 0, EXACT) end
  local ok, expired = pcall(redis.call, "ZRANGEBYSCORE", zkey, "-inf", now)
  if not ok then fail("corrupt", zkey .. ": " .. tostring(expired.err or expired)) end
  for _, id in ipairs(expired) do
    local permits = int_field(hkey, id, hash_fields(hkey, id)[1] or 0, 0, held)
    held = held - permits
    redis.call("HDEL", hkey, id)
    redis.call("ZREM", zkey, id)
  end
  if #expired > 0 then
    if held == 0 then
      redis.call("DEL", zkey, hkey)
    else
      redis.call("HSET", hkey, "#", held)
    end
  end
  local function refresh_expiry()
    local last = redis.call("ZRANGE", zkey, -1, -1, "WITHSCORES")
    if last[2] ~= nil then
      local ms = ceil_div(math.max(0, tonumber(last[2]) - now), 1000) + grace_ms
      if ms < 1 then ms = 1 end
      redis.call("PEXPIRE", zkey, ms)
      redis.call("PEXPIRE", hkey, ms)
    end
  end
  local function decision(allowed, h)
    return { allowed, limit, math.max(0, limit - h), 0, -1, 0 }
  end
  if op == "release" or op == "renew" then
    local score = redis.call("ZSCORE", zkey, lease)
    if not score then return decision(0, held), nil end
    if op == "renew" then
      return decision(1, held), function()
        redis.call("ZADD", zkey, now + lease_us, lease)
        refresh_expiry()
      end
    end
    local permits = int_field(hkey, lease, hash_fields(hkey, lease)[1], 0, held)
    local left = held - permits
    return decision(1, left), function()
      redis.call("ZREM", zkey, lease)
      redis.call("HDEL", hkey, lease)
      if left == 0 then redis.call("DEL", zkey, hkey) else redis.call("HSET", hkey, "#", left) end
    end
  end
  local after = held + n
  if after > limit then return decision(0, held), nil end
  -- A peek takes nothing: it reports what is free now.
  if op == "peek" then return decision(1, held), nil end
  if redis.call("ZSCORE", zkey, lease) then fail("args", "lease " .. lease .. " already held") end
  return decision(1, after), function()
    redis.call("ZADD", zkey, now + lease_us, lease)
    redis.call("HSET", hkey, lease, n, "#", after)
    refresh_expiry()
  end
end
