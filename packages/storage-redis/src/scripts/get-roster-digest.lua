-- The group's roster digest: a script rather than a plain GET so that it runs on the primary even on a
-- client set to read from replicas, since a digest must be current.
-- KEYS[1] roster digest
-- Returns the digest as a decimal string, or false when it was never advanced
return redis.call('GET', KEYS[1])
