-- Creates a lease if the key never had one. A key with a tombstone (its lease was deleted) is created
-- again only when the caller asks to recreate it: the new version then follows the old one and the
-- highest epoch is kept, so that neither repeats after delete-then-recreate.
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker
-- ARGV[1] write token, ARGV[2] incarnation to set if the group has none, ARGV[3] lease key,
-- ARGV[4] epoch, ARGV[5] state JSON (without the epoch), ARGV[6] '1' to recreate a deleted key,
-- ARGV[7] change feed channel, on which a lease created is published as `created`
-- Returns { incarnation, 1, new value } | { incarnation, 0, current value } | { incarnation, 2, bad tombstone }
--   | { incarnation, 3, tombstone } (deleted, and not asked to recreate)
local incarnation = redis.call('GET', KEYS[3])
local current = redis.call('HGET', KEYS[1], ARGV[3])
if current then return { incarnation, 0, current } end
local version = '1'
local epoch = ARGV[4]
local tombstone = redis.call('HGET', KEYS[2], ARGV[3])
if tombstone then
  local deleted, high = string.match(tombstone, '^(%d+):(%d+):')
  if not deleted then return { incarnation, 2, tombstone } end
  if ARGV[6] ~= '1' then return { incarnation, 3, tombstone } end
  version = string.format('%d', tonumber(deleted) + 1)
  if tonumber(high) > tonumber(epoch) then epoch = high end
  redis.call('HDEL', KEYS[2], ARGV[3])
end
if not incarnation then
  incarnation = ARGV[2]
  redis.call('SET', KEYS[3], incarnation)
end
local value = version .. ':' .. epoch .. ':' .. ARGV[1] .. ':' .. ARGV[5]
redis.call('HSET', KEYS[1], ARGV[3], value)
redis.call('PUBLISH', ARGV[7], 'created:' .. ARGV[3])
return { incarnation, 1, value }
