-- One page of a group's leases. Paging happens in the adapter, so that no single call holds the server
-- for long however large the group is.
-- KEYS[1] leases hash, KEYS[2] incarnation marker
-- ARGV[1] cursor, ARGV[2] page size hint
-- Returns { incarnation, next cursor, { field, value, ... } }
local page = redis.call('HSCAN', KEYS[1], ARGV[1], 'COUNT', ARGV[2])
return { redis.call('GET', KEYS[2]), page[1], page[2] }
