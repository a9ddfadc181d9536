-- Sluicegate: a Redisson-style limiter's stored configuration.
-- KEYS: the config hash, the state hash. ARGV: op ("try_set", "set" or "get"), then for the
-- setters rate, interval_us and type ("overall" or "per_client").
-- try_set writes only if no configuration exists (1 if it wrote); set overwrites it and
-- clears every client's state (1); get returns {rate, interval, type} as stored, {} if none,
-- or {"corrupt", detail}.
local function config(KEYS, ARGV)
  local op = ARGV[1]
  if op == "get" then
    local kind = redis.call("TYPE", KEYS[1]).ok
    if kind == "none" then return {} end
    if kind ~= "hash" then return { "corrupt", KEYS[1] .. " is a " .. kind } end
    return redis.call("HMGET", KEYS[1], "rate", "interval", "type")
  end
  if op == "try_set" and redis.call("EXISTS", KEYS[1]) == 1 then return 0 end
  redis.call("DEL", KEYS[1])
  redis.call("HSET", KEYS[1], "rate", ARGV[2], "interval", ARGV[3], "type", ARGV[4])
  if op == "set" then redis.call("DEL", KEYS[2]) end
  return 1
end
