-- leases.lua: gateways' leases, and the reservations of gateways whose lease is gone.
--
-- A gateway (a ledger's owner) holds {p}:lease:<owner> (a TTL, renewed) and is listed
-- in {p}:owners; its calls that will be recorded are listed in {p}:open:<owner> until
-- their usage records are written. A gateway that died leaves its lease to expire:
-- another then settles its reservations (at the tokens last checkpointed) and records
-- them.
--
-- ARGV[1] the action, ARGV[2] the key prefix "{p}:", then per action:
--   renew  owner, ttl ms           take or extend the lease; returns 1
--   drop   owner                   give the lease up (a graceful stop); returns 1
--   check  tokens, id, owner       checkpoint a live call's tokens so far; returns 1
--   forget id, id, ...             usage records written: drop those reservations
--   orphans limit, self, owner, id up to `limit` {owner, id, record fields} of owners
--                                  other than self whose lease is gone, after (owner,
--                                  id) in that order (and forgets owners with nothing
--                                  left)

local action, k = ARGV[1], ARGV[2]

if action == 'renew' then
  redis.call('SET', k .. 'lease:' .. ARGV[3], '1', 'PX', ARGV[4])
  redis.call('SADD', k .. 'owners', ARGV[3])
  return 1
elseif action == 'drop' then
  redis.call('DEL', k .. 'lease:' .. ARGV[3])
  return 1
elseif action == 'check' then
  local record = k .. 'res:' .. ARGV[4]
  local mine = redis.call('HMGET', record, 'o', 'd')
  if mine[1] == ARGV[5] and not mine[2] then redis.call('HSET', record, 't', ARGV[3]) end
  return 1
elseif action == 'forget' then
  for i = 3, #ARGV do
    local record = k .. 'res:' .. ARGV[i]
    local owner = redis.call('HGET', record, 'o')
    -- only a settled record: one still live is its gateway's (or a reclaimer's) to settle
    if owner and redis.call('HEXISTS', record, 'd') == 1 then
      redis.call('DEL', record)
      redis.call('SREM', k .. 'open:' .. owner, ARGV[i])
    end
  end
  return 1
elseif action == 'orphans' then
  -- in (owner, id) order, those after (ARGV[5], ARGV[6]): a caller pages through them
  local limit, after_owner, after_id = tonumber(ARGV[3]), ARGV[5], ARGV[6]
  local reply = {}
  local owners = redis.call('SMEMBERS', k .. 'owners')
  table.sort(owners)
  for _, owner in ipairs(owners) do
    if owner >= after_owner and owner ~= ARGV[4]
        and redis.call('EXISTS', k .. 'lease:' .. owner) == 0 then
      local open = k .. 'open:' .. owner
      local ids = redis.call('SMEMBERS', open)
      if #ids == 0 then redis.call('SREM', k .. 'owners', owner) end
      table.sort(ids)
      for _, id in ipairs(ids) do
        if owner > after_owner or id > after_id then
          local fields = redis.call('HGETALL', k .. 'res:' .. id)
          if #fields == 0 then
            redis.call('SREM', open, id)  -- expired with its period
          else
            reply[#reply + 1] = {owner, id, fields}
            if #reply >= limit then return reply end
          end
        end
      end
    end
  end
  return reply
end
return redis.error_reply('leases.lua: unknown action ' .. tostring(action))
