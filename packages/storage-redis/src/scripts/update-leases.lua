-- A batch of conditional lease writes in one call: each applies only if the stored version equals the
-- expected one. The stored value is "version:epoch:highest epoch:write token:state JSON".
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker
-- ARGV[1] write token, ARGV[2] change feed channel, then six per update:
--   lease key, expected version, new version, epoch, change kind to publish ('' for none), state JSON
-- Returns { incarnation, per update: 1 (applied) | current value (conflict) | { tombstone or nil } (no lease) }
local leases, tombstones = KEYS[1], KEYS[2]
local token, channel = ARGV[1], ARGV[2]
local out = { redis.call('GET', KEYS[3]) }
for base = 3, #ARGV, 6 do
  local key = ARGV[base]
  local current = redis.call('HGET', leases, key)
  if not current then
    out[#out + 1] = { redis.call('HGET', tombstones, key) }
  else
    local version, high = string.match(current, '^(%d+):%d+:(%d+):')
    if version ~= ARGV[base + 1] then
      out[#out + 1] = current
    else
      local epoch = ARGV[base + 3]
      if tonumber(high) < tonumber(epoch) then high = epoch end
      redis.call('HSET', leases, key, ARGV[base + 2] .. ':' .. epoch .. ':' .. high .. ':' .. token .. ':' .. ARGV[base + 5])
      out[#out + 1] = 1
      local kind = ARGV[base + 4]
      if kind ~= '' then redis.call('PUBLISH', channel, kind .. ':' .. key) end
    end
  end
end
return out
