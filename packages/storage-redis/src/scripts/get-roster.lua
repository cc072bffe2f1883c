-- The whole roster of a group: one command on one key, whatever the number of members. A script rather
-- than a plain HGETALL so that it runs on the primary even on a client set to read from replicas: a roster
-- must be current.
-- KEYS[1] roster hash
-- Returns { field, value, ... }: worker id -> "version:write token:state JSON", and '' -> the counter
return redis.call('HGETALL', KEYS[1])
