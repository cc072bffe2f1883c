-- The group's roster digest with the names of the advances after a digest, from one moment.
-- KEYS[1] roster digest, KEYS[2] roster moves
-- ARGV[1] since: the digest the reader last read
-- ARGV[2] how many advances are kept
-- Returns { digest (a decimal string, or false when never advanced), the names of each advance after
-- since up to the digest, in order (false for one not kept) }; the digest alone when since is at or
-- above it, or further back than the advances kept
local digest = redis.call('GET', KEYS[1])
local value = tonumber(digest) or 0
local since = tonumber(ARGV[1])
if since >= value or value - since > tonumber(ARGV[2]) then return { digest } end
local fields = {}
for d = since + 1, value do fields[#fields + 1] = d end
local names = redis.call('HMGET', KEYS[2], unpack(fields))
local reply = { digest }
for i = 1, #names do reply[i + 1] = names[i] end
return reply
