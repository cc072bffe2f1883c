-- The named members of a group and the roster's counter: one command on the roster hash, reading only
-- those fields. A script, as for the whole roster, so that it runs on the primary even on a client set to
-- read from replicas.
-- KEYS[1] roster hash
-- ARGV worker ids (at most limits.maxWatchedMembers, each once)
-- Returns { counter, value of ARGV[1], ... }: false where a field is missing
return redis.call('HMGET', KEYS[1], '', unpack(ARGV))
