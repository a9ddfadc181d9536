-- Permit leasing (crates/sluicegate/src/lease): a call's limits lease a batch of permits
-- together, all or none, and give back what a lease left unused where that is exact.
-- Concatenated after decide.lua (see src/scripts.rs).
--
-- ARGV: now ("" = TIME), op ("take" or "return"), want (permits to lease beyond the
-- request), life_us, then the leases to give back first: their count, and per lease
-- taken_at, end, unused; then the limit count and each limit's arguments exactly as decide.lua takes them (kind,
-- permits, parameters). Only fixed-window, sliding-window, gcra, token-bucket and
-- leaky-bucket lease. KEYS: one per limit.
-- Reply of take: {"OK", now, leased, end, given_back, then each limit's decision of the
-- request (6 numbers, as decide.lua)}; the request is decided as a plain check, and the lease
-- taken only if it is allowed. Reply of return: {"OK", now, given_back}. `given_back` sums,
-- over the leases given back, the least any limit took back.

-- Rewrites a list of (slot, permits) pairs, keeping its time to live.
local function rewrite_pairs(key, at, ps)
  local ttl = redis_call("PTTL", key)
  redis_call("DEL", key)
  if #at == 0 or ttl <= 0 then return end
  local flat = {}
  for j = 1, #at do
    flat[#flat + 1] = format("%d", at[j])
    flat[#flat + 1] = format("%d", ps[j])
  end
  redis_call("RPUSH", key, unpack(flat))
  redis_call("PEXPIRE", key, ttl)
end

-- One limit's lease operations: most(life) -> the most permits a lease may hold; end(k) ->
-- the end bound of a lease of k, or nil; charge(k, e) ->
-- false, or a commit charging k permits used before e; give_back(taken_at, e, u) -> permits
-- uncounted.
local function fixed_window_lease(key, now, limit, window, grace_ms)
  local function start_of(t) local _, into = idiv(t, window); return t - into end
  local function stored()
    local raw = get_state(key)
    if raw == false then return nil, 0 end
    local colon = string.find(raw, ":", 1, true)
    if colon == nil then bad_state(key, raw) end
    return int_field(key, "s", string.sub(raw, 1, colon - 1), 0, 2 ^ 53),
      int_field(key, "c", string.sub(raw, colon + 1), 0, EXACT)
  end
  return {
    most = function() return math.huge end,
    ["end"] = function()
      local s, c = stored()
      local start = start_of(now)
      if s ~= nil and c > 0 and s > start then return nil end
      return start + window
    end,
    charge = function(k)
      local decision, commit = decide_fixed_window(key, now, k, "check", limit, window, grace_ms)
      return decision[1] == 1 and commit
    end,
    give_back = function(taken_at, _, u)
      local s, c = stored()
      local start = start_of(taken_at)
      if s ~= start or start + window <= now then return 0 end
      local back = math.min(u, c)
      write_window(key, s, c - back, start + window - now, grace_ms)
      return back
    end,
  }
end

local function sliding_window_lease(key, now, limit, window, k, grace_ms)
  local per = window_slots(k)
  return {
    most = function() return math.huge end,
    ["end"] = function()
      local current = window_slot_of(now, window, per)
      local ss = read_pairs(key, EXACT)
      if #ss > 0 and ss[#ss] > current then return nil end
      return window_slot_start(current + 1, window, per)
    end,
    charge = function(n)
      local decision, commit = decide_sliding_window(key, now, n, "check", limit, window, k,
        grace_ms)
      return decision[1] == 1 and commit
    end,
    give_back = function(taken_at, _, u)
      local slot = window_slot_of(taken_at, window, per)
      local ss, ps = read_pairs(key, EXACT)
      for j = 1, #ss do
        if ss[j] == slot then
          local back = math.min(u, ps[j])
          ps[j] = ps[j] - back
          if ps[j] == 0 then
            table.remove(ss, j)
            table.remove(ps, j)
          end
          rewrite_pairs(key, ss, ps)
          return back
        end
      end
      return 0
    end,
  }
end

-- A bucket lease's bounds (the core's lease_permits and lease_end): charged as at its end,
-- it must keep the debt from now within the tolerance, so a lease of k ends within
-- tolerance - k intervals; it holds at most what leaves it usable for min(life, half the
-- tolerance).
local function bucket_most(p, life)
  local usable = math.min(life - 1, (idiv((idiv(p.tolerance, p.d)), 2)))
  return (idiv(p.tolerance - usable * p.d, p.interval))
end

local function bucket_end(p, now, k)
  return now + (idiv(p.tolerance - k * p.interval, p.d)) + 1
end

local function gcra_lease(key, now, p)
  return {
    most = function(life) return bucket_most(p, life) end,
    ["end"] = function(k) return bucket_end(p, now, k) end,
    charge = function(k, e)
      -- Fits now, so at any later time: charged as granted at e - 1.
      if gcra_decision(key, now, k, "check", p)[1] ~= 1 then return false end
      local at = math.max(now, e - 1)
      local _, debt_after = gcra_decision(key, at, k, "check", p)
      if debt_after == nil then return false end
      return function() write_tat(key, now, debt_after, p, at) end
    end,
    -- A bucket takes nothing back (the core's lease::give_back says why).
    give_back = function() return 0 end,
  }
end

local function leaky_lease(key, now, p)
  -- Ticks from the pair (us, r) to the microsecond t, or 0 if t is not later.
  local function until_t(us, r, t)
    if t < us or (t == us and r > 0) then return 0 end
    return (t - us) * p.d - r
  end
  return {
    most = function(life) return bucket_most(p, life) end,
    ["end"] = function(k) return bucket_end(p, now, k) end,
    charge = function(k, e)
      local level, now_us, now_r = leaky_level(key, now, p)
      local added = k * p.interval
      if level + added > p.tolerance then return false end
      local after = math.max(level, until_t(now_us, now_r, math.max(now, e - 1))) + added
      return function()
        write_level(key, after, now_us, now_r, p, after + (now_us - now) * p.d + now_r)
      end
    end,
    give_back = function() return 0 end,
  }
end

-- One limit's lease operations from ARGV[i] on (after its kind and permits).
local function parse_lease(KEYS, ARGV, now, kind, i, k)
  local key = KEYS[k]
  if kind == "gcra" or kind == "token-bucket" then
    return gcra_lease(key, now, (bucket_params(ARGV, i)))
  elseif kind == "leaky-bucket" then
    return leaky_lease(key, now, (bucket_params(ARGV, i)))
  elseif kind == "fixed-window" then
    return fixed_window_lease(key, now, to_number(ARGV[i]), to_number(ARGV[i + 1]),
      to_number(ARGV[i + 2]))
  elseif kind == "sliding-window" then
    return sliding_window_lease(key, now, to_number(ARGV[i]), to_number(ARGV[i + 1]),
      to_number(ARGV[i + 2]), to_number(ARGV[i + 3]))
  end
  fail("args", tostring(kind) .. " does not lease")
end

-- ARGV[i] as a whole number of at least `least`, or an "args" fault naming `what`.
local function whole_arg(ARGV, i, least, what)
  local v = to_number(ARGV[i])
  if v == nil or v < least or v ~= math.floor(v) then
    fail("args", "lease argument " .. what .. ": " .. tostring(ARGV[i]))
  end
  return v
end

local function run_lease(KEYS, ARGV)
  local now = decision_time(ARGV[1])
  local op = ARGV[2]
  local want, life = whole_arg(ARGV, 3, 0, "want"), whole_arg(ARGV, 4, 0, "life")
  local backs = whole_arg(ARGV, 5, 0, "lease count")
  for b = 0, backs - 1 do
    whole_arg(ARGV, 6 + 3 * b, 0, "taken_at")
    whole_arg(ARGV, 7 + 3 * b, 0, "end")
    whole_arg(ARGV, 8 + 3 * b, 0, "unused")
  end
  local i, k = 6 + 3 * backs, 1
  local count = whole_arg(ARGV, i, 1, "limit count")
  i = i + 1
  local deciders, leases = {}, {}
  for j = 1, count do
    local kind, at_i, at_k = ARGV[i], i + 2, k
    deciders[j], i, k = parse_limit(KEYS, ARGV, now, i, k)
    leases[j] = parse_lease(KEYS, ARGV, now, kind, at_i, at_k)
  end
  local given_back = 0
  for b = 0, backs - 1 do
    local taken_at, lease_end = to_number(ARGV[6 + 3 * b]), to_number(ARGV[7 + 3 * b])
    local unused = to_number(ARGV[8 + 3 * b])
    if unused > 0 then
      local back = unused
      for j = 1, count do
        back = math.min(back, leases[j].give_back(taken_at, lease_end, unused))
      end
      given_back = given_back + back
    end
  end
  if op == "return" then return { "OK", now, given_back } end
  if op ~= "take" then fail("args", "lease op " .. tostring(op)) end
  -- The request, as a plain check, all or nothing (decide.lua's run).
  local decisions, commits, all_allowed = {}, {}, true
  for j = 1, count do
    decisions[j], commits[j] = deciders[j]("check")
    if decisions[j][1] ~= 1 then all_allowed = false end
  end
  local leased, e = 0, now + life
  if all_allowed then
    for j = 1, count do commits[j]() end
    leased = want
    for j = 1, count do
      leased = math.min(leased, decisions[j][3], leases[j].most(life))
    end
    for j = 1, count do
      local bound = leases[j]["end"](leased)
      if bound == nil then leased = 0 else e = math.min(e, bound) end
    end
    if e <= now then leased = 0 end
    if leased > 0 then
      local charges = {}
      for j = 1, count do
        charges[j] = leases[j].charge(leased, e)
        if not charges[j] then leased = 0; break end
      end
      if leased > 0 then
        for j = 1, count do charges[j]() end
      end
    end
  else
    for j = 1, count do
      if decisions[j][1] == 1 then decisions[j] = deciders[j]("peek") end
    end
  end
  if leased == 0 then e = 0 end
  return append_decisions({ "OK", now, leased, e, given_back }, decisions)
end

local lease = entry_point(run_lease)
