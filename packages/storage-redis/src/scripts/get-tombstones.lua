-- The tombstones of leases that disappeared from a listing.
-- KEYS[1] tombstones hash, KEYS[2] incarnation marker
-- ARGV lease keys
-- Returns { incarnation, tombstone or nil per key }
local out = { redis.call('GET', KEYS[2]) }
for i = 1, #ARGV do
  out[i + 1] = redis.call('HGET', KEYS[1], ARGV[i])
end
return out
