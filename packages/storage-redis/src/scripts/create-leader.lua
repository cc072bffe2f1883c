-- Creates the group's leader record if it has none. The stored value is "version:write token:state JSON".
-- KEYS[1] leader record, KEYS[2] incarnation marker
-- ARGV[1] write token, ARGV[2] incarnation to set if the group has none, ARGV[3] state JSON
-- Returns { incarnation, 1, new value } | { incarnation, 0, current value }
local incarnation = redis.call('GET', KEYS[2])
local current = redis.call('GET', KEYS[1])
if current then return { incarnation, 0, current } end
if not incarnation then
  incarnation = ARGV[2]
  redis.call('SET', KEYS[2], incarnation)
end
local value = '1:' .. ARGV[1] .. ':' .. ARGV[3]
redis.call('SET', KEYS[1], value)
return { incarnation, 1, value }
