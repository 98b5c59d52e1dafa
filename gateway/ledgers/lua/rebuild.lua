-- rebuild.lua: the quota configuration changed; charge what is live into the new tree
-- (quota.ledger.InProcessLedger.rebuild). Idempotent, so every replica may run it
-- when it adopts the configuration: a replica that reserved with the old tree in
-- between is corrected by its own run.
--
-- Rates: expire, then re-charge every live reservation, oldest id first, recording new
-- charges; a reservation whose queue is gone is dropped. Budgets: a node's usage
-- after adds alone is a function of the queues' totals (what exceeds a child's
-- guaranteed part is its share of the parent), so each queue's total is charged
-- again as one amount; usage of queues that are gone is dropped.
--
-- KEYS[2j-1], KEYS[2j]  per flavor-resource j: its state and its expiry zset (rates),
--                       or this period's state and an unused key (budgets)
-- ARGV[1] now   ARGV[2] node count N   ARGV[3] flavor-resource count F
-- then N times (node name, index of its parent or 0), queues first,
-- then per flavor-resource: kind ('r' | 'b') and N guaranteed amounts.

local now_s = ARGV[1]
local count, frs = tonumber(ARGV[2]), tonumber(ARGV[3])
local names, parent, index = {}, {}, {}
for n = 1, count do
  names[n] = ARGV[2 + 2 * n]
  parent[n] = tonumber(ARGV[3 + 2 * n])
  index[names[n]] = n
end

-- The static path of node n: its nodes and a {g=...} per depth (all add_usage needs).
local function path_of(n, guaranteed)
  local nodes, path = {}, {}
  while n ~= 0 do
    nodes[#nodes + 1] = names[n]
    path[#path + 1] = {g = guaranteed[n]}
    n = parent[n]
  end
  return nodes, path
end

-- Ids are "<epoch>.<n>" (plain numbers before epochs): order by n.
local function sequence(id)
  return tonumber(string.match(id, '(%d+)$')) or 0
end

local function clear_usage(state)
  for _, field in ipairs(redis.call('HKEYS', state)) do
    if string.sub(field, 1, 2) == 'u:' then redis.call('HDEL', state, field) end
  end
end

-- Charge `amount` for the queue node n into `totals` (node -> usage); returns deltas.
local function recharge(n, amount, guaranteed, totals)
  local nodes, path = path_of(n, guaranteed)
  local u = {}
  for d = 1, #nodes do u[d] = totals[nodes[d]] or 0 end
  local delta = zeros(#nodes)
  add_usage(path, u, amount, delta)
  for d = 1, #nodes do totals[nodes[d]] = u[d] end
  return nodes, delta
end

local function rebuild_rate(state, exp, guaranteed)
  expire(state, exp, now_s)
  local ids = redis.call('ZRANGE', exp, 0, -1)
  table.sort(ids, function(a, b) return sequence(a) < sequence(b) end)
  clear_usage(state)
  local totals = {}
  for _, id in ipairs(ids) do
    local _, order = decode_charges(redis.call('HGET', state, 'c:' .. id) or nil)
    local n = order[1] and index[order[1]]
    if n == nil or string.sub(order[1], 1, 2) ~= 'q:' then
      redis.call('ZREM', exp, id)
      redis.call('HDEL', state, 'a:' .. id, 'c:' .. id)
    else
      local amount = tonumber(redis.call('HGET', state, 'a:' .. id))
      local nodes, delta = recharge(n, amount, guaranteed, totals)
      redis.call('HSET', state, 'c:' .. id, merge_charges(nil, nodes, delta))
    end
  end
  for node, value in pairs(totals) do set_usage(state, node, value) end
end

local function rebuild_budget(state, guaranteed)
  local queues = {}
  for n = 1, count do
    if string.sub(names[n], 1, 2) == 'q:' then
      queues[n] = tonumber(redis.call('HGET', state, 'u:' .. names[n])) or 0
    end
  end
  clear_usage(state)
  local totals = {}
  for n = 1, count do
    if queues[n] and queues[n] ~= 0 then recharge(n, queues[n], guaranteed, totals) end
  end
  for node, value in pairs(totals) do set_usage(state, node, value) end
end

local at = 4 + 2 * count
for j = 1, frs do
  local rate = ARGV[at] == 'r'
  local guaranteed = {}
  for n = 1, count do guaranteed[n] = tonumber(ARGV[at + n]) end
  at = at + 1 + count
  if rate then
    rebuild_rate(KEYS[2 * j - 1], KEYS[2 * j], guaranteed)
  else
    rebuild_budget(KEYS[2 * j - 1], guaranteed)
  end
end
return 1
