-- The group's leader record.
-- KEYS[1] leader record, KEYS[2] incarnation marker
-- Returns { incarnation, value or nil }
return { redis.call('GET', KEYS[2]), redis.call('GET', KEYS[1]) }
