-- reserve.lua: reserve amounts of several resources of one flavor over a queue and
-- every cohort above it, all or nothing (quota.ledger.InProcessLedger.reserve).
--
-- KEYS[1]        {p}:seq
-- KEYS[2i]       state of resource i: {p}:fr:<flavor>|<resource> (a rate) or
--                {p}:fr:<flavor>|<resource>@<period end> (a budget, this period)
-- KEYS[2i+1]     {p}:exp:<flavor>|<resource> (used for rates only)
-- The new reservation's record {p}:res:<id> is named here (the static "p" .. id), as its
-- id comes from KEYS[1]: it shares the hash tag, so it lives on the same slot.
--
-- ARGV[1]        the call's static part (JSON, see common.lua)
-- ARGV[2]        now
-- then per resource, in the order of the static part's "r": amount, expiry
-- then a mode: '' (a call), or 'restore' to charge what was spent before Redis lost its
--                state (even past the quota, whether or not {p}:epoch exists; no record)
-- then the call's note ('' for none): kept in the record (n) for whoever records the
--                call should its gateway die; a call with a note is listed in
--                {p}:open:<owner> until its usage record is written
-- then, only for a call whose API key has limits of its own (the key's level, below
--                the queue): the key's id, and per limited resource its name, kind ('r'
--                | 'b'), limit, amount, expiry; its state and expiry keys follow the
--                path's in KEYS, in that order (see common.lua). The record keeps k (the
--                key's id), ka:<resource> and ke:<resource> for reconcile.lua.
--
-- Returns {-1} when {p}:epoch is missing: Redis lost its state (a restart without
-- persistence, an eviction) and the ledger must be rebuilt before anything is granted.
-- Returns {1, id, remaining_1, remaining_2, ...} for a grant, or
-- {0, i, level, name, available, retry_after, remaining_1, wait_1, ...} when resource i
-- is the one that fits last (the first of those that fit equally late), wait_j being
-- the seconds until resource j fits (0 if it fits now) and retry_after wait_i. Every
-- number is a string. The key's resources count after the queue's (i > the queue's
-- count): a refusal by the key names level 'Key' and the key's id, and its remaining
-- and waits are the key's resources'; of levels that fit equally late, the queue's is
-- named.

local static = cjson.decode(ARGV[1])
local now_s = ARGV[2]
local now = tonumber(now_s)
local queue, flavor, nodes = static.q, static.f, static.n
local depth = #nodes
local walk_limit, margin = static.w, static.m
local wants = static.r  -- each {name, rate, path}, completed here
local restoring = ARGV[3 + 2 * #wants] == 'restore'
local epoch = redis.call('GET', static.k .. 'epoch')
if not epoch and not restoring then return {-1} end
for i, want in ipairs(wants) do
  want.amount = tonumber(ARGV[1 + 2 * i])
  want.expiry_s = ARGV[2 + 2 * i]
  want.expiry = tonumber(want.expiry_s)
  want.state, want.exp = KEYS[2 * i], KEYS[2 * i + 1]
  want.nodes, want.field = nodes, ''
end
-- The key's level: each resource a path of one node, 'k', with nothing to borrow.
local key = ARGV[5 + 2 * #wants]
local kwants = {}
if key and key ~= '' then
  local a, k = 6 + 2 * #wants, 2 + 2 * #wants
  while ARGV[a] do
    local limit = tonumber(ARGV[a + 2])
    kwants[#kwants + 1] = {name = ARGV[a], rate = ARGV[a + 1] == 'r',
      path = {{g = limit, sub = limit}}, nodes = {'k'}, field = 'k',
      amount = tonumber(ARGV[a + 3]), expiry_s = ARGV[a + 4], expiry = tonumber(ARGV[a + 4]),
      state = KEYS[k], exp = KEYS[k + 1]}
    a, k = a + 5, k + 2
  end
end

-- quota.ledger.InProcessLedger._time_to_fit: seconds until `want` fits if nothing else
-- is reserved. For a rate, walk the earliest live reservations of the flavor-resource
-- (of any queue) in expiry order, taking back what each charged to a node on this
-- queue's path, until what the queue may take covers the amount; past the walk, or
-- for a budget, the window's or the period's end.
local function time_to_fit(want)
  if want.amount <= math.max(0, want.avail[1]) then return 0 end
  if want.rate then
    local depth_of, u = {}, {}
    for d = 1, #want.nodes do
      depth_of[want.nodes[d]] = d
      u[d] = want.u[d]
    end
    local entries = redis.call('ZRANGE', want.exp, 0, walk_limit - 1, 'WITHSCORES')
    for k = 1, #entries, 2 do
      local charges, order = decode_charges(redis.call('HGET', want.state, 'c:' .. entries[k]) or nil)
      local freed = false
      for _, node in ipairs(order) do
        local d = depth_of[node]
        if d and charges[node] ~= 0 then
          u[d] = u[d] - charges[node]
          freed = true
        end
      end
      if freed and available_along(want.path, u)[1] >= want.amount then
        return math.max(0, tonumber(entries[k + 1]) - now)
      end
    end
  end
  return math.max(0, want.expiry - now)
end

-- quota.reasons.blocker_for: the lowest node whose own borrowing limit binds, or
-- else the root (the shared pool is short).
local function blocker(want)
  local d = 1
  while d < depth do
    local n = want.path[d]
    if n.bl then
      local cap = n.sub - n.g - math.max(0, want.u[d] - n.g) + n.bl
      if cap < want.avail[d + 1] then break end
    end
    d = d + 1
  end
  if d == 1 then return 'ClusterQueue', string.sub(nodes[d], 3) end
  return 'Cohort', string.sub(nodes[d], 3)
end

-- The index of the resource of `list` that fits last (the first of those equally late).
local function fits_last(list, waits)
  local last = nil
  for i, want in ipairs(list) do
    waits[i] = time_to_fit(want)
    if want.amount > math.max(0, want.avail[1]) and (last == nil or waits[i] > waits[last]) then
      last = i
    end
  end
  return last
end

local function refusal(index, level, name, list, waits)
  local want = list[index]
  local reply = {0, tostring(index), level, name, int_str(math.max(0, want.avail[1])),
    float_str(waits[index])}
  for i, each in ipairs(list) do
    reply[#reply + 1] = int_str(math.max(0, each.avail[1]))
    reply[#reply + 1] = float_str(waits[i])
  end
  return reply
end

local function refuse()
  local waits, kwaits = {}, {}
  local last, klast = fits_last(wants, waits), fits_last(kwants, kwaits)
  if klast and (last == nil or kwaits[klast] > waits[last]) then
    local reply = refusal(klast, 'Key', key, kwants, kwaits)
    reply[2] = tostring(#wants + klast)
    return reply
  end
  local level, name = blocker(wants[last])
  return refusal(last, level, name, wants, waits)
end

-- Charge one resource to the tree and remember, for a rate, what each node got.
local function charge(want, id, record, restoring)
  local delta = zeros(#want.nodes)
  add_usage(want.path, want.u, want.amount, delta)
  write_usage(want.state, want.nodes, want.u, delta)
  local lifetime = want.expiry - now + margin
  if want.rate then
    redis.call('ZADD', want.exp, want.expiry_s, id)
    redis.call('HSET', want.state, 'a:' .. id, int_str(want.amount),
      'c:' .. id, merge_charges(nil, want.nodes, delta))
    keep_for(want.exp, lifetime)
  end
  keep_for(want.state, lifetime)
  if not restoring then
    redis.call('HSET', record, want.field .. 'a:' .. want.name, int_str(want.amount),
      want.field .. 'e:' .. want.name, want.expiry_s)
  end
end

local function measure(list)
  for _, want in ipairs(list) do
    if want.rate then expire(want.state, want.exp, now_s) end
    want.u = usage_along(want.state, want.nodes)
    want.avail = available_along(want.path, want.u)
  end
end

local function short(list)
  for _, want in ipairs(list) do
    if want.amount > math.max(0, want.avail[1]) then return true end
  end
  return false
end

measure(wants)
measure(kwants)
if not restoring and (short(wants) or short(kwants)) then return refuse() end

-- Unique across Redis restarts: the counter starts again at 1 in an empty Redis, the
-- epoch (random, set by each rebuild) does not repeat.
local id = (epoch or 'restored') .. '.' .. tostring(redis.call('INCR', KEYS[1]))
local record = static.p .. id
local latest = now
for _, list in ipairs({wants, kwants}) do
  for _, want in ipairs(list) do
    charge(want, id, record, restoring)
    latest = math.max(latest, want.expiry)
  end
end
if not restoring then
  -- o: the ledger (gateway process) that made it; a settle must name all three
  redis.call('HSET', record, 'q', queue, 'f', flavor, 'o', static.o)
  if #kwants > 0 then redis.call('HSET', record, 'k', key) end
  keep_for(record, latest - now + margin)
  local note = ARGV[4 + 2 * #wants]
  if note and note ~= '' then
    local open = static.k .. 'open:' .. static.o
    redis.call('HSET', record, 'n', note)
    redis.call('SADD', open, id)
    keep_for(open, latest - now + margin)
  end
end
local reply = {1, id}
for _, want in ipairs(wants) do
  reply[#reply + 1] = int_str(math.max(0, available_along(want.path, want.u)[1]))
end
return reply
