-- Replaces the leader record if its stored version equals the expected one.
-- KEYS[1] leader record, KEYS[2] incarnation marker
-- ARGV[1] write token, ARGV[2] expected version, ARGV[3] new version, ARGV[4] state JSON
-- Returns { incarnation, 1 } | { incarnation, 0, current value } | { incarnation, 2 } (no record)
local incarnation = redis.call('GET', KEYS[2])
local current = redis.call('GET', KEYS[1])
if not current then return { incarnation, 2 } end
if string.match(current, '^(%d+):') ~= ARGV[2] then return { incarnation, 0, current } end
redis.call('SET', KEYS[1], ARGV[3] .. ':' .. ARGV[1] .. ':' .. ARGV[4])
return { incarnation, 1 }
