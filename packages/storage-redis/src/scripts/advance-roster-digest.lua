-- Advances the group's roster digest and keeps the worker ids the advance names, in one step: an advance
-- racing another never loses its names to it, and a reader that sees the digest sees them.
-- KEYS[1] roster digest, KEYS[2] roster moves (a hash: the digest value an advance wrote -> its names)
-- ARGV[1] the worker ids named, as a JSON array ("[]": nobody)
-- ARGV[2] how many advances are kept: the one that many before this one is dropped
-- Returns the digest written
local digest = redis.call('INCR', KEYS[1])
redis.call('HSET', KEYS[2], digest, ARGV[1])
local kept = tonumber(ARGV[2])
if digest > kept then redis.call('HDEL', KEYS[2], digest - kept) end
return digest
