-- usage.lua: what one node holds of one flavor-resource now, after expiring.
--
-- KEYS[1]  state: {p}:fr:<flavor>|<resource> (a rate) or ...@<period end> (a budget)
-- KEYS[2]  {p}:exp:<flavor>|<resource> (rates only)
-- ARGV[1] now   ARGV[2] node ("q:<queue>" | "c:<cohort>")   ARGV[3] kind ('r' | 'b')
--
-- Returns the usage in milli-units, as a string.

if ARGV[3] == 'r' then expire(KEYS[1], KEYS[2], ARGV[1]) end
return redis.call('HGET', KEYS[1], 'u:' .. ARGV[2]) or '0'
