-- A batch of conditional lease writes in one call: each applies only if the stored version equals the
-- expected one. The caller sends each new value whole ("version:epoch:write token:state JSON"), so
-- that the script only compares and stores. Reads and writes go to Redis a thousand fields at a time
-- (HMGET, HSET): a call from Lua costs far more than a comparison, and the keys of one batch are distinct.
-- KEYS[1] leases hash, KEYS[2] tombstones hash, KEYS[3] incarnation marker, KEYS[4] highest-epoch hash
-- ARGV[1] change feed channel, ARGV[2] number of updates, then three per update:
--   lease key, expected version, new value;
-- then three per change to publish if its update applies: update number (from 1), change kind, and the
-- owner it is addressed to ('' for none). The change goes out as `kind:lease key`: one addressed to an
-- owner on the owner's channel `<change feed channel>:to:<owner>` alone, which names the owner, so that
-- only the subscribers that asked for that owner's handovers are sent it; any other on the group's channel.
-- Returns { incarnation, per update: 1 (applied) | current value (conflict) | { tombstone or nil } (no lease) }
local leases, tombstones, epochs = KEYS[1], KEYS[2], KEYS[4]
local count = tonumber(ARGV[2])
local step = 1000

local fields = {}
for i = 1, count do fields[i] = ARGV[3 * i] end
local currents = {}
for first = 1, count, step do
  local values = redis.call('HMGET', leases, unpack(fields, first, math.min(first + step - 1, count)))
  for j = 1, #values do currents[first + j - 1] = values[j] end
end

local out = { redis.call('GET', KEYS[3]) }
local writes, applied = {}, {}
for i = 1, count do
  local key = fields[i]
  local current = currents[i]
  if not current then
    out[i + 1] = { redis.call('HGET', tombstones, key) }
  else
    local version, epoch = string.match(current, '^(%d+):(%d+):')
    if version ~= ARGV[3 * i + 1] then
      out[i + 1] = current
    else
      local value = ARGV[3 * i + 2]
      -- An epoch written lower than the stored one: keep the highest, for a recreate after a delete.
      local nextEpoch = string.match(value, '^%d+:(%d+):')
      if tonumber(nextEpoch) < tonumber(epoch) then
        local high = redis.call('HGET', epochs, key)
        if not high or tonumber(high) < tonumber(epoch) then redis.call('HSET', epochs, key, epoch) end
      end
      writes[#writes + 1] = key
      writes[#writes + 1] = value
      if #writes >= 2 * step then
        redis.call('HSET', leases, unpack(writes))
        writes = {}
      end
      applied[i] = true
      out[i + 1] = 1
    end
  end
end
if #writes > 0 then redis.call('HSET', leases, unpack(writes)) end
for j = 3 * count + 3, #ARGV, 3 do
  local i = tonumber(ARGV[j])
  if applied[i] then
    local message = ARGV[j + 1] .. ':' .. fields[i]
    if ARGV[j + 2] ~= '' then
      redis.call('PUBLISH', ARGV[1] .. ':to:' .. ARGV[j + 2], message)
    else
      redis.call('PUBLISH', ARGV[1], message)
    end
  end
end
return out
