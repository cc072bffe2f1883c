-- One lease, and its tombstone when it has none, so that the adapter can tell a delete from a loss.
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker
-- ARGV[1] lease key
-- Returns { incarnation, value or nil, tombstone or nil }
local current = redis.call('HGET', KEYS[1], ARGV[1])
local tombstone = false
if not current then tombstone = redis.call('HGET', KEYS[2], ARGV[1]) end
return { redis.call('GET', KEYS[3]), current, tombstone }
