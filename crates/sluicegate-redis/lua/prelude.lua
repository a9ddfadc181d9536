-- Sluicegate: one or more limits decided atomically, all or nothing.
--
-- Mirrors the Rust core (crates/sluicegate/src/algorithm) decision for decision. Lua numbers
-- are IEEE doubles, exact for integers below 2^53, while a time in ticks since the epoch
-- (microseconds times up to 1024) is far above that. So a time is kept as a pair
-- (whole microseconds, remainder in ticks below d), and only differences between times are
-- ever formed in ticks: those are bounded by a bucket's tolerance, which the Rust side keeps
-- below 2^50. Every division goes through idiv, which corrects the float quotient.
--
-- The same code runs as Redis Functions (one library, loaded once: lua/functions.lua) or, on a
-- Redis without them, as EVALSHA scripts (src/scripts.rs). Every entry point therefore takes
-- its keys and arguments as parameters (KEYS, ARGV) rather than reading the script globals.
--
-- ARGV of decide (decide.lua): now ("" = the server's TIME), op, limit count, then per limit:
--   kind, permits, then the kind's parameters (see the decide_* functions).
-- KEYS: per limit, in order: one key (gcra, token-bucket) or two (concurrency).
-- Reply: {"OK", now, then per limit: allowed, limit, remaining, reset_us, retry_us (-1: none),
--   wait_us} or {"ERR", kind, detail}.
-- The one-limit entry points (one.lua) take and return less: see there.

local EXACT = 4503599627370496 -- 2^52: every stored difference stays below this
-- Numbers reach Redis through string.format("%d") (exact for integers below 2^63, and cheaper
-- than redis.call's own %.17g), not through Lua's tostring or `..`, which keep 14 digits: only
-- a count checked to be below 10^14 is joined with `..` (JOINED_EXACTLY in fixed_window.lua).

-- The standard functions a decision calls, as library locals: a global costs a lookup through
-- Redis's protected globals on every use, about twice a local's cost. Every entry point binds
-- them on its first call (bind_standard), since Redis 7.0 hides math and string while it
-- loads a library.
local floor, format, redis_call, redis_pcall, to_number, type_of, string_find, string_sub
local function bind_standard()
  floor, format, redis_call, redis_pcall = math.floor, string.format, redis.call, redis.pcall
  to_number, type_of, string_find, string_sub = tonumber, type, string.find, string.sub
end

-- Raised as a table, so every entry point runs under pcall and replies through finish: a
-- table error escaping a Redis Function crashed Redis 7.0.15 (SIGSEGV formatting the error).
local function fail(kind, detail)
  return error({ sluicegate = true, kind = kind, detail = detail })
end

-- q, r with a = q * b + r and 0 <= r < b, for exact integers 0 <= a < 2^53, 0 < b.
local function idiv(a, b)
  local q = floor(a / b)
  local r = a - q * b
  while r < 0 do q = q - 1; r = r + b end
  while r >= b do q = q + 1; r = r - b end
  return q, r
end

local function ceil_div(a, b)
  -- Most rates tick in whole microseconds (d = 1): no division to make.
  if b == 1 then return a end
  local q, r = idiv(a, b)
  if r > 0 then q = q + 1 end
  return q
end

-- How a check reads its key (gcra_check_whole_us, fixed_window_check). On many keys most are
-- missing when checked (each expires once it no longer matters), and a missing key that the
-- check admits is written anyway: one `SET key value NX GET` then both finds it missing and
-- writes it, a Redis call less (a call is about a sixth of a decision's cost in Redis). On a
-- key that is there the same call writes nothing and costs more than a GET, so a check takes
-- it only while most of the last checks found their key missing: `key_misses`, above 0.
-- Counted up by a miss and down by a find within -8..8 by each check (inline: a Lua function
-- call here cost more than the count), and kept from call to call in the library. Redis takes
-- NX with GET from 7.0 on, as it does Functions: functions.lua starts the count at 0; the
-- EVALSHA scripts (Redis 6 too) start it far below, where no call's checks can lift it.
local key_misses = -2 ^ 40

-- A stored field as an exact integer in [lo, hi], or a corrupt-state error naming it.
local function int_field(key, name, raw, lo, hi)
  local n = to_number(raw)
  if n == nil or n ~= floor(n) or n < lo or n > hi then
    fail("corrupt", key .. " field " .. name .. " = " .. tostring(raw))
  end
  return n
end

local function hash_fields(key, ...)
  local ok, values = pcall(redis.call, "HMGET", key, ...)
  if not ok then fail("corrupt", key .. ": " .. tostring(values.err or values)) end
  return values
end

-- `format(pattern, n)` for a number `n`, each text made once: the numbers a decision writes
-- again and again (a key's life in ms, a window's start) take few values, and a lookup costs a
-- fraction of a format. At most `most` texts are kept: at the cap they are all dropped.
local function formatted_once(pattern, most)
  local texts, count = {}, 0
  return function(n)
    local text = texts[n]
    if text == nil then
      text = format(pattern, n)
      if count >= most then texts, count = {}, 0 end
      texts[n] = text
      count = count + 1
    end
    return text
  end
end

-- A time to live in ms as a string: a limit gives its keys lives of at most its tolerance or
-- window in ms.
local ms_text = formatted_once("%d", 4096)

-- A key's time to live in ms, as a string: until `ticks` (of 1/d us) from now, rounded up,
-- plus the grace; at least 1.
local function expiry_ms(ticks, d, grace_ms)
  -- Tested here too: a call less on every write in whole microseconds.
  local us = ticks
  if d ~= 1 then us = ceil_div(ticks, d) end
  local ms = ceil_div(us, 1000) + grace_ms
  if ms < 1 then ms = 1 end
  return ms_text(ms)
end

local function pexpire(key, ticks, d, grace_ms)
  redis.call("PEXPIRE", key, expiry_ms(ticks, d, grace_ms))
end

-- The state of the algorithms kept as one string of integers joined by ':' (bucket algorithms,
-- fixed window), read with GET: the string, or false if the key is missing. Any other type
-- under the key is a corrupt-state error.
local function get_state(key)
  -- redis.pcall answers an error as a table, where pcall(redis.call) would raise and unwind.
  local raw = redis_pcall("GET", key)
  if type_of(raw) == "table" then fail("corrupt", key .. ": " .. tostring(raw.err)) end
  return raw
end

-- Such a state that does not have the expected shape.
local function bad_state(key, raw)
  fail("corrupt", key .. " = " .. string.format("%q", raw))
end

-- Writes such a state and its time to live in one call.
local function set_state(key, value, ticks, d, grace_ms)
  redis_call("SET", key, value, "PX", expiry_ms(ticks, d, grace_ms))
end

-- The time of the decision: `at` in microseconds, or Redis's clock (TIME) if empty.
local function decision_time(at)
  if at == "" then
    local t = redis_call("TIME")
    return to_number(t[1]) * 1000000 + to_number(t[2])
  end
  return to_number(at)
end

-- A check's reply in one value (batch.lua, and the one-limit entry points called alone): the
-- value its check returned last (gcra_check_whole_us, fixed_window_check), from which the
-- client works out the rest, doubled, plus one for a denial; nil when there is none, or when
-- doubled it would pass 2^53, where Lua stops counting exactly.
local COMPACT_BELOW = 2 ^ 52
local function compact_of(allowed, value)
  if value == nil or value >= COMPACT_BELOW then return nil end
  if allowed == 1 then return value * 2 end
  return value * 2 + 1
end

-- A one-limit entry point's check (one_gcra.lua, one_fixed_window.lua) as `check` decides it
-- (gcra_check_whole_us, fixed_window_check): {now, value} (compact_of), or {now, allowed,
-- remaining, reset_us, retry_us, wait_us}; nil for what `check` leaves to the general path.
local function check_alone(check, key, now, n, p)
  local allowed, remaining, reset, retry, wait, value = check(key, now, n, p)
  if allowed == nil then return nil end
  local compact = compact_of(allowed, value)
  if compact ~= nil then return { now, compact } end
  return { now, allowed, remaining, reset, retry, wait }
end

-- The reply of a one-limit entry point (one_*.lua), its state charged if it allowed and op is
-- not a peek: {now, allowed, remaining, reset_us, retry_us, wait_us}, made of the decision
-- itself (the client knows the limit). The charge is `write(...)`, if `write` is not nil:
-- a function and its arguments rather than a closure, which would cost an allocation per
-- captured variable on every call.
local function one_reply(now, op, decision, write, ...)
  -- A denied charge comes with a write of its own: it counts all the same.
  if write ~= nil and op ~= "peek" and (decision[1] == 1 or op == "charge") then write(...) end
  decision[2] = decision[1]
  decision[1] = now
  return decision
end

-- A one-limit entry point takes its limit's parameters as one string of integers joined by
-- ':'. As a Redis Function, whose library outlives its calls, it parses each distinct string
-- once (a call would otherwise spend more on tonumber than on deciding); as a script, on
-- every call. `parse` maps the list of numbers to the parameters.
local params_seen, params_count = {}, 0
local function one_params(raw, parse)
  local p = params_seen[raw]
  if p ~= nil then return p end
  local list = {}
  for v in string.gmatch(raw, "[^:]+") do
    local n = to_number(v)
    if n == nil or n ~= floor(n) then fail("args", "parameters " .. raw) end
    list[#list + 1] = n
  end
  p = parse(list)
  if params_count >= 256 then params_seen, params_count = {}, 0 end
  params_seen[raw] = p
  params_count = params_count + 1
  return p
end

-- The script's reply from pcall(run): run's reply, or {"ERR", kind, detail}.
local function finish(ok, result)
  if ok then return result end
  if type_of(result) == "table" and result.sluicegate then
    return { "ERR", result.kind, result.detail }
  end
  return { "ERR", "script", tostring(type_of(result) == "table" and result.err or result) }
end

-- An entry point running `run`: the standard locals bound, `run` under pcall (a table error
-- escaping a Redis Function crashed Redis 7.0.15), its reply or its error as finish makes it.
local function entry_point(run)
  return function(KEYS, ARGV)
    if floor == nil then bind_standard() end
    return finish(pcall(run, KEYS, ARGV))
  end
end
