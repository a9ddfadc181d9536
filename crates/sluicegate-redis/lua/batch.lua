-- Several one-limit decisions in one call (src/batch.rs sends the calls that queue up while
-- earlier ones are in flight): each decided, and charged, in order, exactly as its own call of
-- one_gcra or one_fixed_window would decide it; one decision's error (a corrupt key) is its
-- own reply and leaves the others alone. A call of a Redis Function costs about as much as the
-- work of a decision, so sharing one among many is the cheapest way to more decisions per
-- second. Concatenated after one_gcra.lua and one_fixed_window.lua (see src/scripts.rs).
--
-- ARGV: runs of decisions that share their arguments (the common case: one limiter's checks),
-- six per run: entry ("g": one_gcra, "f": one_fixed_window), now ("" = TIME, read once per
-- call), op, permits, parameters, and how many decisions (keys) the run holds. KEYS: one per
-- decision, in order. Reply: one flat array: per run its time, then per decision of a check
-- run one value or three; of any other run five, its entry point's reply after the time
-- (allowed, remaining, reset_us, retry_us, wait_us), an error ("ERR", kind, detail) padded with
-- zeros to five. A check in one value when its entry's check gave the value the rest follows
-- from (gcra_check_whole_us, fixed_window_check): twice that value if allowed, twice it plus
-- one if denied (>= 0 either way; below 2^53, where Lua counts exactly). Else three:
-- -1 - remaining, reset_us, and the verdict (-1 allowed, a retry_us >= 0 denied for now, -2
-- denied for good; a check never waits); or "ERR", kind, detail. Flat, because Redis probes
-- every table of a reply for seven special fields: a table per decision cost more than
-- deciding. A check in one value, because Redis turns each value of a reply into RESP at about
-- 700 instructions, and the client reads each at about 600.
-- `check` decides a check without the general path's tables, or answers nothing for the
-- cases it leaves to `decide` (the general path, which never tries the check again).
local batch_entries = {
  g = { decide = one_gcra_general, check = gcra_check_whole_us, parse = one_bucket_params },
  f = { decide = one_fixed_window_general, check = fixed_window_check, parse = window_params },
}

-- One decision by its entry point (`ok`: its parameters `p` parsed, else `p` is the error):
-- the entry point's reply after its time, or "ERR", kind, detail, 0, 0.
local function decide_by_entry(entry, ok, p, key, now, op, n)
  local decided, reply = ok, p
  if ok then decided, reply = pcall(entry.decide, key, now, op, n, p) end
  if not decided then reply = finish(false, reply) end
  if reply[1] == "ERR" then return "ERR", reply[2], reply[3], 0, 0 end
  return reply[2], reply[3], reply[4], reply[5], reply[6]
end

-- The reply, kept from call to call: growing a fresh one to a few hundred values cost more
-- than clearing its end. Redis reads a reply up to its first nil, and has read it before the
-- next call begins.
local batch_replies = {}

local function run_batch(KEYS, ARGV)
  local replies, server_now, k, i, m = batch_replies, nil, 1, 1, 0
  while ARGV[i] ~= nil do
    local entry, at, op = batch_entries[ARGV[i]], ARGV[i + 1], ARGV[i + 2]
    local n, count = to_number(ARGV[i + 3]), to_number(ARGV[i + 5])
    if count == nil or count < 0 or count > #KEYS - k + 1 then
      fail("args", "a run of " .. tostring(ARGV[i + 5]) .. " decisions")
    end
    local now
    if at == "" then
      if server_now == nil then server_now = decision_time("") end
      now = server_now
    else
      now = to_number(at)
      if now == nil then fail("args", "time " .. tostring(at)) end
    end
    local ok, p = false, nil
    if entry == nil then
      p = { sluicegate = true, kind = "args", detail = "unknown batch entry " .. tostring(ARGV[i]) }
    else
      ok, p = pcall(one_params, ARGV[i + 4], entry.parse)
    end
    m = m + 1
    replies[m] = now
    local compact = op == "check"
    local check = ok and compact and entry.check
    for _ = 1, count do
      local allowed, remaining, reset, retry, wait, value = nil, nil, nil, nil, nil, nil
      if check then
        -- Not under pcall (2% of Redis's instructions per decision): a check raises nothing.
        -- It reads with redis.pcall, answers nothing for a state it does not know, and its
        -- one write cannot be refused once the call has begun (Redis refuses a function
        -- that may write before it runs, when out of memory). A check that answers nothing
        -- wrote nothing (its write is its last step): decided again in full.
        allowed, remaining, reset, retry, wait, value = check(KEYS[k], now, n, p)
      end
      if allowed == nil then
        allowed, remaining, reset, retry, wait = decide_by_entry(entry, ok, p, KEYS[k], now, op, n)
      end
      if not compact then
        replies[m + 1], replies[m + 2], replies[m + 3], replies[m + 4], replies[m + 5] =
          allowed, remaining, reset, retry, wait
        m = m + 5
      elseif allowed == "ERR" then
        replies[m + 1], replies[m + 2], replies[m + 3] = allowed, remaining, reset
        m = m + 3
      elseif value ~= nil and value < COMPACT_BELOW then
        -- compact_of, inline: calling it cost 445 more Redis instructions per decision (18,745
        -- against 18,300 in FCALL, callgrind, gcra on 100k keys).
        if allowed == 1 then replies[m + 1] = value * 2 else replies[m + 1] = value * 2 + 1 end
        m = m + 1
      else
        local verdict = -1
        if allowed ~= 1 then
          verdict = retry
          if verdict < 0 then verdict = -2 end
        end
        replies[m + 1], replies[m + 2], replies[m + 3] = -1 - remaining, reset, verdict
        m = m + 3
      end
      k = k + 1
    end
    i = i + 6
  end
  replies[m + 1] = nil
  return replies
end

-- A malformed call (which this crate does not send) fails whole: {"ERR", kind, detail}.
local batch = entry_point(run_batch)
