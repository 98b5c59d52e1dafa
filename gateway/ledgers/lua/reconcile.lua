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
-- ARGV[1] reservation id   ARGV[2] now   ARGV[3] depth D (0: the queue is gone from
-- the configuration; only settle)   ARGV[4] resources R
-- then D node names along the queue's path (depth 1 = the queue),
-- then per resource: name, actual ('' keeps the estimate), kind ('r' | 'b'),
--                    period end of the budget key ('' for a rate),
--                    and D times (guaranteed, subtree_quota, borrowing_limit or '')
--
-- Returns 1 if the reservation was open, else 0.

local record = KEYS[1]
if redis.call('EXISTS', record) == 0 then return 0 end
local id, now_s = ARGV[1], ARGV[2]
local now = tonumber(now_s)
local depth, count = tonumber(ARGV[3]), tonumber(ARGV[4])

local nodes = {}
for d = 1, depth do nodes[d] = ARGV[4 + d] end
local at = 5 + depth

-- Is the reservation's part of this resource still counted?
local function live(resource, rate, period_end)
  local expiry = tonumber(redis.call('HGET', record, 'e:' .. resource))
  if expiry == nil or expiry <= now then return false end
  -- a budget's key is the current period's: only a reservation of that period is in it
  return rate or expiry == period_end
end

local function correct(state, path, resource, actual, rate)
  local diff = actual - tonumber(redis.call('HGET', record, 'a:' .. resource))
  if diff == 0 then return end
  local u = usage_along(state, nodes)
  local delta = zeros(depth)
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

if depth > 0 then
  for i = 1, count do
    local resource, actual = ARGV[at], tonumber(ARGV[at + 1])
    local rate, period_end = ARGV[at + 2] == 'r', tonumber(ARGV[at + 3])
    local path
    path, at = read_path(at + 4, depth)
    local state, exp = KEYS[2 * i], KEYS[2 * i + 1]
    if rate then expire(state, exp, now_s) end
    if actual ~= nil and live(resource, rate, period_end) then
      correct(state, path, resource, actual, rate)
    end
  end
end
redis.call('DEL', record)
return 1
