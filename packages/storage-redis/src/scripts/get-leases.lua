-- The named leases of a group, and the tombstones of those it has no lease for, so that the adapter can
-- tell a delete from a loss for each, as get-lease.lua does for one: one HMGET of the leases hash, one of
-- the tombstones hash for the keys it found no lease for (none when it found them all), and the group's
-- incarnation marker, in one script, so that a client set to read from replicas still reads the primary.
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker
-- ARGV lease keys (at most limits.maxLeasesPerRead, each once)
-- Returns { incarnation, value of ARGV[1] or nil, tombstone of ARGV[1] or nil, value of ARGV[2] or nil, ... }:
-- a key's tombstone is read only when it has no value
local out = { redis.call('GET', KEYS[3]) }
if #ARGV == 0 then return out end
local values = redis.call('HMGET', KEYS[1], unpack(ARGV))
local absent = {}
for i = 1, #ARGV do
  if not values[i] then absent[#absent + 1] = ARGV[i] end
end
local tombstones = {}
if #absent > 0 then tombstones = redis.call('HMGET', KEYS[2], unpack(absent)) end
local nth = 0
for i = 1, #ARGV do
  local tombstone = false
  if not values[i] then
    nth = nth + 1
    tombstone = tombstones[nth]
  end
  out[2 * i] = values[i]
  out[2 * i + 1] = tombstone
end
return out
