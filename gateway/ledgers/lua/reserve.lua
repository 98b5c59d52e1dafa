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
--
-- Returns {1, id, remaining_1, reset_after_1, ...} for a grant, or
-- {0, i, level, name, available, retry_after, remaining_1, reset_after_1, ...} when
-- resource i is the first that does not fit. Every number is a string.

local static = cjson.decode(ARGV[1])
local now_s = ARGV[2]
local now = tonumber(now_s)
local queue, flavor, nodes = static.q, static.f, static.n
local depth = #nodes
local walk_limit, margin = static.w, static.m
local wants = static.r  -- each {name, rate, path}, completed here
for i, want in ipairs(wants) do
  want.amount = tonumber(ARGV[1 + 2 * i])
  want.expiry_s = ARGV[2 + 2 * i]
  want.expiry = tonumber(want.expiry_s)
  want.state, want.exp = KEYS[2 * i], KEYS[2 * i + 1]
end

-- Seconds until what is available of `want` next grows.
local function reset_after(want)
  if not want.rate then return math.max(0, want.expiry - now) end
  local first = redis.call('ZRANGE', want.exp, 0, 0, 'WITHSCORES')
  if #first == 0 then return 0 end
  return math.max(0, tonumber(first[2]) - now)
end

-- Seconds until the earliest reservations of the flavor-resource (of any queue)
-- together holding at least `short` expire; else the window or period end.
local function retry_after(want, short)
  if want.rate then
    local entries = redis.call('ZRANGE', want.exp, 0, walk_limit - 1, 'WITHSCORES')
    local freed = 0
    for k = 1, #entries, 2 do
      freed = freed + (tonumber(redis.call('HGET', want.state, 'a:' .. entries[k])) or 0)
      if freed >= short then return math.max(0, tonumber(entries[k + 1]) - now) end
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

local function append_levels(reply)
  for _, want in ipairs(wants) do
    reply[#reply + 1] = int_str(math.max(0, available_along(want.path, want.u)[1]))
    reply[#reply + 1] = float_str(reset_after(want))
  end
  return reply
end

local function refuse(i)
  local want = wants[i]
  local free = math.max(0, want.avail[1])
  local level, name = blocker(want)
  local retry = retry_after(want, want.amount - free)
  return append_levels({0, tostring(i), level, name, int_str(free), float_str(retry)})
end

-- Charge one resource to the tree and remember, for a rate, what each node got.
local function charge(want, id, record)
  local delta = zeros(depth)
  add_usage(want.path, want.u, want.amount, delta)
  write_usage(want.state, nodes, want.u, delta)
  local lifetime = want.expiry - now + margin
  if want.rate then
    redis.call('ZADD', want.exp, want.expiry_s, id)
    redis.call('HSET', want.state, 'a:' .. id, int_str(want.amount),
      'c:' .. id, merge_charges(nil, nodes, delta))
    keep_for(want.exp, lifetime)
  end
  keep_for(want.state, lifetime)
  redis.call('HSET', record, 'a:' .. want.name, int_str(want.amount), 'e:' .. want.name, want.expiry_s)
end

for _, want in ipairs(wants) do
  if want.rate then expire(want.state, want.exp, now_s) end
  want.u = usage_along(want.state, nodes)
  want.avail = available_along(want.path, want.u)
end
for i, want in ipairs(wants) do
  if want.amount > math.max(0, want.avail[1]) then return refuse(i) end
end

local id = tostring(redis.call('INCR', KEYS[1]))
local record = static.p .. id
local latest = now
for _, want in ipairs(wants) do
  charge(want, id, record)
  latest = math.max(latest, want.expiry)
end
redis.call('HSET', record, 'q', queue, 'f', flavor)
keep_for(record, latest - now + margin)
return append_levels({1, id})
