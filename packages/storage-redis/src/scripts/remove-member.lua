-- Removes one member of a group's roster if its stored version equals the expected one. The counter stays
-- (versions go on above it) and keeps this call's write token, so that a removal the client resent after
-- a reconnect is recognised as applied.
-- KEYS[1] roster hash
-- ARGV[1] worker id, ARGV[2] expected version, ARGV[3] write token
-- Returns { 1, counter } | { 0, counter, current value } | { 2, counter } (no member)
--   | { 3, counter } (the counter is not a number)
local stored = redis.call('HMGET', KEYS[1], '', ARGV[1])
local counter, current = stored[1], stored[2]
if not current then return { 2, counter } end
if string.match(current, '^(%d+):') ~= ARGV[2] then return { 0, counter, current } end
-- A roster written by this adapter always has its counter; a member without one keeps versions at least
-- above its own.
local high = ARGV[2]
if counter then
  high = string.match(counter, '^(%d+)')
  if not high then return { 3, counter } end
end
counter = high .. ':' .. ARGV[3]
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HSET', KEYS[1], '', counter)
return { 1, counter }
