-- common.lua: helpers every ledger script starts with (prepended by redis_ledger.py;
-- Redis scripts cannot import each other).
--
-- Data, all under one hash tag {p} so a script may touch any of it (Redis Cluster
-- keeps one tag on one slot). Amounts are integer milli-units, times are seconds
-- since the epoch as the caller's clock gives them; a node is "q:<queue>" or
-- "c:<cohort>" (a queue and a cohort may share a name).
--
--   {p}:fr:<flavor>|<resource>        a rate's state (hash)
--       u:<node>   the node's usage (quota.tree's ResourceNode.usage)
--       a:<id>     what reservation <id> holds of it now
--       c:<id>     JSON list {node, charge, node, charge, ...}: what <id> charged to each
--                  node, taken back exactly when it expires
--   {p}:exp:<flavor>|<resource>       a rate's live reservations: zset of id by expiry
--   {p}:fr:<flavor>|<resource>@<end>  a budget's state for the period ending at <end>
--                                     (hash of u:<node>); a new period is a new, empty
--                                     key, so budgets reset without touching anything
--   {p}:key:<key>|<resource>          an API key's own level (its limits, below its
--   {p}:kexp:<key>|<resource>         queue): a rate's state and zset as above, with one
--   {p}:key:<key>|<resource>@<end>    node "k"; a budget's state per period. Only keys
--                                     with limits have them.
--   {p}:res:<id>                      a reservation until it is settled (hash): q queue,
--                                     f flavor, o owner (the ledger that made it),
--                                     a:<resource> estimate, e:<resource> expiry; a call
--                                     to be recorded also n (its note), t (tokens so
--                                     far), and once settled d and u:<resource> (what it
--                                     used): it stays until its usage record is written
--   {p}:open:<owner>                  the ids of the owner's calls to be recorded (set)
--   {p}:lease:<owner>                 the owner's lease (TTL); {p}:owners lists owners
--   {p}:seq                           the reservation id counter; an id is <epoch>.<n>
--   {p}:epoch                         set by whoever rebuilt the ledger last (random):
--                                     missing means Redis lost its state, and nothing
--                                     is granted until a replica has rebuilt it
--   {p}:rebuild                       the lock of the replica rebuilding (owner, TTL)
--
-- A rate's two keys are always written together and given the same TTL, so they can
-- only vanish together (after a long idle spell), never leave usage without the
-- charges that would take it back.
--
-- A path is the queue's path to the root, depth 1 first; its static part per
-- flavor-resource is {g = guaranteed, sub = subtree_quota, bl = borrowing_limit|nil}.
-- reserve.lua and reconcile.lua get everything static about a call (it depends only
-- on the queue, the flavor, the resources and the quota config) as ARGV[1], one JSON
-- object that Python builds once per path and caches (redis_ledger._static_path):
--
--   {"p": "{p}:res:",                record key prefix
--    "k": "{p}:",                    every key's prefix (for {p}:epoch)
--    "o": owner,                     the ledger making the reservation
--    "q": queue, "f": flavor,
--    "w": RETRY_WALK_LIMIT,          how many reservations a retry_after may walk
--    "m": KEY_MARGIN_SECONDS,        how long every key outlives what it holds
--    "n": ["q:<queue>", "c:<cohort>", ...],           the nodes, depth 1 first
--    "r": [{"name": resource, "rate": true|false,     per resource, in call order
--           "path": [{"g": .., "sub": .., "bl": ..}, ...]}, ...]}  (no "bl": no limit)
--
-- cjson.decode gives the tables the helpers below use as they are. Measured on Redis
-- 7.0 (three resources, depth 2), a script decoding it costs about what one reading
-- the same 33 items from ARGV did (7.4 vs 7.0 us a call, and Redis no longer parses
-- 32 more arguments), less than splitting one string with string.gmatch (11.8 us);
-- the client encodes one cached string instead of ~30 more items per call.

local function int_str(n)
  return string.format('%.0f', n)  -- never "1e+15": HSET must store plain integers
end

local function float_str(x)
  return string.format('%.17g', x)  -- round-trips exactly to a Python float
end

local function zeros(n)
  local t = {}
  for i = 1, n do t[i] = 0 end
  return t
end

-- Set a usage field, dropping it at 0 so idle nodes cost nothing.
local function set_usage(state, node, value)
  if value == 0 then
    redis.call('HDEL', state, 'u:' .. node)
  else
    redis.call('HSET', state, 'u:' .. node, int_str(value))
  end
end

-- Give a key at least `seconds` more to live (never shorten it: another caller may
-- have written something that lives longer). Relative, so the server's clock need
-- not agree with the callers' `now`.
local function keep_for(key, seconds)
  local ms = math.ceil(seconds * 1000)
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 and ttl >= ms then return end
  redis.call('PEXPIRE', key, ms)
end

local function usage_along(state, nodes)
  local fields = {}
  for d = 1, #nodes do fields[d] = 'u:' .. nodes[d] end
  local values = redis.call('HMGET', state, unpack(fields))
  local u = {}
  for d = 1, #nodes do u[d] = tonumber(values[d]) or 0 end
  return u
end

local function write_usage(state, nodes, u, delta)
  for d = 1, #nodes do
    if delta[d] ~= 0 then set_usage(state, nodes[d], u[d]) end
  end
end

-- quota.tree.available for every depth at once, from the root down: avail[d] is what
-- a workload in the node at depth d may still take (may be negative).
local function available_along(path, u)
  local top = #path
  local avail = {}
  local total = path[top].sub - u[top]
  avail[top] = total
  for d = top - 1, 1, -1 do
    local n = path[d]
    if n.bl then
      local used_in_parent = math.max(0, u[d] - n.g)
      total = math.min(total, n.sub - n.g - used_in_parent + n.bl)
    end
    total = total + math.max(0, n.g - u[d])
    avail[d] = total
  end
  return avail
end

-- quota.tree.add_usage, adding to delta[d] what each depth got.
local function add_usage(path, u, amount, delta)
  local d = 1
  while true do
    local free_local = math.max(0, path[d].g - u[d])
    u[d] = u[d] + amount
    delta[d] = delta[d] + amount
    if d == #path or amount <= free_local then return end
    amount = amount - free_local
    d = d + 1
  end
end

-- quota.tree.remove_usage, subtracting from delta[d] what each depth gave back.
local function remove_usage(path, u, amount, delta)
  local d = 1
  while true do
    local stored_in_parent = u[d] - path[d].g
    u[d] = u[d] - amount
    delta[d] = delta[d] - amount
    if d == #path or stored_in_parent <= 0 then return end
    amount = math.min(amount, stored_in_parent)
    d = d + 1
  end
end

local function decode_charges(text)
  local charges, order = {}, {}
  if text then
    local list = cjson.decode(text)
    for k = 1, #list, 2 do
      order[#order + 1] = list[k]
      charges[list[k]] = tonumber(list[k + 1])
    end
  end
  return charges, order
end

-- Add delta[d] to what the reservation charged nodes[d]; keeps the existing order,
-- so the first node stays the reservation's queue.
local function merge_charges(text, nodes, delta)
  local charges, order = decode_charges(text)
  for d = 1, #nodes do
    if charges[nodes[d]] == nil then
      order[#order + 1] = nodes[d]
      charges[nodes[d]] = 0
    end
    charges[nodes[d]] = charges[nodes[d]] + delta[d]
  end
  local list = {}
  for _, node in ipairs(order) do
    list[#list + 1] = node
    list[#list + 1] = int_str(charges[node])
  end
  return cjson.encode(list)
end

-- Expire a rate lazily: every reservation whose window ended by `now` gives back
-- exactly what it charged to each node.
local function expire(state, exp, now)
  local ids = redis.call('ZRANGEBYSCORE', exp, '-inf', now)
  if #ids == 0 then return end
  local taken = {}
  for _, id in ipairs(ids) do
    local charges, order = decode_charges(redis.call('HGET', state, 'c:' .. id) or nil)
    for _, node in ipairs(order) do
      taken[node] = (taken[node] or 0) + charges[node]
    end
    redis.call('HDEL', state, 'c:' .. id, 'a:' .. id)
  end
  for node, amount in pairs(taken) do
    local before = tonumber(redis.call('HGET', state, 'u:' .. node)) or 0
    set_usage(state, node, before - amount)
  end
  redis.call('ZREMRANGEBYSCORE', exp, '-inf', now)
end
