-- Writes one member of a group's roster if its stored version equals the expected one, or, with an
-- expected version of '', only if the worker id has no member (a join). The new version is one above the
-- group's counter, which every applied write raises, so that a version never repeats for a worker id, not
-- even after remove-then-join. Only this member's field and the counter are read and written: members
-- heartbeat side by side without conflicts.
-- The counter is the field '' (a worker id is never empty): "high version" or "high version:write token
-- of the last removal", the token kept so that a removal the client resent is recognised as applied.
-- KEYS[1] roster hash
-- ARGV[1] worker id, ARGV[2] expected version or '', ARGV[3] write token, ARGV[4] state JSON
-- Returns { 1, counter } (applied: the new version is the counter's) | { 0, counter, current value or false }
--   | { 2, counter } (the counter is not a number)
local stored = redis.call('HMGET', KEYS[1], '', ARGV[1])
local counter, current = stored[1], stored[2]
if current then
  if string.match(current, '^(%d+):') ~= ARGV[2] then return { 0, counter, current } end
elseif ARGV[2] ~= '' then
  return { 0, counter, false }
end
local high, removal = 0, ''
if counter then
  local digits, rest = string.match(counter, '^(%d+)(.*)$')
  if not digits then return { 2, counter } end
  high, removal = tonumber(digits), rest
end
local version = string.format('%d', high + 1)
redis.call('HSET', KEYS[1], '', version .. removal, ARGV[1], version .. ':' .. ARGV[3] .. ':' .. ARGV[4])
return { 1, version .. removal }
