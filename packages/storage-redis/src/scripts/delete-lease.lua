-- Deletes a lease if its stored version equals the expected one, leaving a tombstone with its version
-- and highest epoch (and the write token, so that a replayed delete is recognised as applied).
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker, KEYS[4] highest-epoch hash
-- ARGV[1] write token, ARGV[2] lease key, ARGV[3] expected version
-- Returns { incarnation, 1 } | { incarnation, 0, current value } | { incarnation, 2, tombstone or nil }
local incarnation = redis.call('GET', KEYS[3])
local current = redis.call('HGET', KEYS[1], ARGV[2])
if not current then return { incarnation, 2, redis.call('HGET', KEYS[2], ARGV[2]) } end
local version, epoch = string.match(current, '^(%d+):(%d+):')
if version ~= ARGV[3] then return { incarnation, 0, current } end
local high = redis.call('HGET', KEYS[4], ARGV[2])
if not high or tonumber(high) < tonumber(epoch) then high = epoch end
redis.call('HDEL', KEYS[4], ARGV[2])
redis.call('HDEL', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[2], ARGV[2], version .. ':' .. high .. ':' .. ARGV[1])
return { incarnation, 1 }
