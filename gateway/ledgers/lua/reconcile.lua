-- reconcile.lua: settle a reservation with what was really used
-- (quota.ledger.InProcessLedger.reconcile): refund the difference, or charge an
-- overrun even past the quota. A resource whose window or period has ended is left
-- alone (its charges were taken back already). The record is then deleted: a
-- reservation is settled once, and later calls find nothing to do.
--
-- KEYS[1]      {p}:res:<id>
-- KEYS[2i]     state of resource i: {p}:fr:<flavor>|<resource> (a rate) or
--              {p}:fr:<flavor>|<resource>@<end> for the period `now` is in (a budget)
-- KEYS[2i+1]   {p}:exp:<flavor>|<resource> (rates only)
--
-- ARGV[1] the call's static part (JSON, see common.lua; with no nodes and no
--         resources when the queue is gone from the configuration: only settle)
-- ARGV[2] reservation id   ARGV[3] now
-- then per resource, in the order of the static part's "r": actual ('' keeps the
--         estimate), period end of the budget key ('' for a rate)
-- then the owner the grant names (the ledger that made it), then 'drop' or '': a
--         reservation with a note (a call that will be recorded) is otherwise kept,
--         marked settled (d, and u:<resource> what was used), until its usage record is
--         written (leases.lua forget); one without, or with 'drop', is deleted
-- then, for a reservation at its API key's level too, per key resource: its name, kind
--         ('r' | 'b') and actual; the key's id, estimates and expiries are the record's
--         (k, ka:<resource>, ke:<resource>), and so are its state keys' names (a budget's
--         is of the period it was reserved in)
--
-- Returns 1 if the reservation was open, 0 if there is none of that id (settled
-- already, or made before Redis lost its state), -1 if it is another's: a different
-- queue, flavor or owner (ledger) than the static part names. Only 1 changes anything.

local record = KEYS[1]
local static = cjson.decode(ARGV[1])
local owner = ARGV[4 + 2 * #static.r]
local keep = ARGV[5 + 2 * #static.r] ~= 'drop'
local mine = redis.call('HMGET', record, 'q', 'f', 'o', 'd', 'n', 'k')
if not mine[1] or mine[4] then return 0 end  -- none, or settled already
if mine[1] ~= static.q or mine[2] ~= static.f or mine[3] ~= owner then return -1 end
local id, now_s = ARGV[2], ARGV[3]
local now = tonumber(now_s)
local nodes = static.n

-- Is the reservation's part of this resource still counted?
local function live(resource, rate, period_end)
  local expiry = tonumber(redis.call('HGET', record, 'e:' .. resource))
  if expiry == nil or expiry <= now then return false end
  -- a budget's key is the current period's: only a reservation of that period is in it
  return rate or expiry == period_end
end

local function correct(state, nodes, path, actual, rate, estimate)
  local diff = actual - tonumber(redis.call('HGET', record, estimate))
  if diff == 0 then return end
  local u = usage_along(state, nodes)
  local delta = zeros(#nodes)
  if diff > 0 then
    add_usage(path, u, diff, delta)
  else
    remove_usage(path, u, -diff, delta)
  end
  write_usage(state, nodes, u, delta)
  if rate then
    local charges = redis.call('HGET', state, 'c:' .. id) or nil
    redis.call('HSET', state, 'a:' .. id, int_str(actual),
      'c:' .. id, merge_charges(charges, nodes, delta))
  end
end

for i, want in ipairs(static.r) do
  local actual, period_end = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local state, exp = KEYS[2 * i], KEYS[2 * i + 1]
  if want.rate then expire(state, exp, now_s) end
  if actual ~= nil and live(want.name, want.rate, period_end) then
    correct(state, nodes, want.path, actual, want.rate, 'a:' .. want.name)
  end
end

-- The key's level: one node, 'k', in keys named as reserve.lua's caller named them.
if mine[6] then
  local a = 6 + 2 * #static.r
  while ARGV[a] do
    local name, rate, actual = ARGV[a], ARGV[a + 1] == 'r', tonumber(ARGV[a + 2])
    a = a + 3
    local expiry = tonumber(redis.call('HGET', record, 'ke:' .. name))
    if actual ~= nil and expiry ~= nil and expiry > now then
      local base = static.k .. 'key:' .. mine[6] .. '|' .. name
      local state = base
      if rate then
        expire(state, static.k .. 'kexp:' .. mine[6] .. '|' .. name, now_s)
      else
        state = base .. '@' .. int_str(math.floor(expiry))
      end
      correct(state, {'k'}, {{g = 0}}, actual, rate, 'ka:' .. name)
    end
  end
end
if keep and mine[5] then
  local settled = {'d', '1'}
  for i, want in ipairs(static.r) do
    local actual = ARGV[2 + 2 * i]
    if actual ~= '' then
      settled[#settled + 1] = 'u:' .. want.name
      settled[#settled + 1] = actual
    end
  end
  redis.call('HSET', record, unpack(settled))
else
  redis.call('DEL', record)
  redis.call('SREM', static.k .. 'open:' .. owner, id)
end
return 1
