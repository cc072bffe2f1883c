-- Deletes a lease if its stored version equals the expected one, leaving a tombstone with its version
-- and highest epoch (and the write token, so that a replayed delete is recognised as applied).
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker
-- ARGV[1] write token, ARGV[2] lease key, ARGV[3] expected version
-- Returns { incarnation, 1 } | { incarnation, 0, current value } | { incarnation, 2, tombstone or nil }
local incarnation = redis.call('GET', KEYS[3])
local current = redis.call('HGET', KEYS[1], ARGV[2])
if not current then return { incarnation, 2, redis.call('HGET', KEYS[2], ARGV[2]) } end
local version, high = string.match(current, '^(%d+):%d+:(%d+):')
if version ~= ARGV[3] then return { incarnation, 0, current } end
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], version .. ':' .. high .. ':' .. ARGV[1])
return { incarnation, 1 }
