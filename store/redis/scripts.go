package redis

import goredis "github.com/redis/go-redis/v9"

// Every script gets the same two keys, which share the namespace's hash tag
// and therefore one Cluster slot:
//
//	KEYS[1] = {ns}:leases  hash, field = lease key, value = packed record
//	KEYS[2] = {ns}:keys    sorted set of lease keys (all scores 0), so List
//	                        reads a byte-ordered prefix range without HSCAN
//
// The hash field '' (no lease key is empty) holds the epoch floor: the
// highest epoch Prune deleted. It is not in the sorted set, so List never
// sees it; a key without a record starts above it.
//
// A packed record is "epoch,expiry,released,running,owner": epoch and expiry
// are decimal integers (expiry in microseconds of the server's TIME),
// released and running are 0 or 1, and owner is everything after the fourth
// comma (owners may hold commas; never control characters). A revoked term
// has the empty owner and is never live, though it blocks peers until its
// expiry + grace.
//
// Lua 5.1 numbers are doubles, exact up to 2^53; microsecond timestamps are
// about 2^50.7 today, so arithmetic stays exact for centuries. Epochs are
// compared as strings, which is exact for any value a client sends.

// prelude is shared by every script; each script is self-contained so it can
// be cached by SHA on its own.
const prelude = `
if redis.replicate_commands then redis.replicate_commands() end

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function int(n)
  return string.format('%.0f', n)
end

local function decode(key, v)
  local e, x, rel, run, owner = string.match(v, '^(%d+),(%-?%d+),([01]),([01]),(.*)$')
  if not e then
    error('tenure: corrupt lease record for key ' .. key)
  end
  return e, tonumber(x), rel == '1', run == '1', owner
end

local function encode(e, x, rel, run, owner)
  return e .. ',' .. int(x) .. ',' .. (rel and '1' or '0') .. ',' .. (run and '1' or '0') .. ',' .. owner
end

-- next_epoch is max(stored + 1, now): the clock part keeps epochs rising
-- even when Redis lost the record (restart without persistence, failover
-- to a replica that missed the write).
local function next_epoch(e, now)
  local n = now
  if e then
    n = math.max(tonumber(e) + 1, now)
  end
  return int(n)
end
`

// acquireScript starts a term when the key is free (rule 1 of package store).
//
// It first checks which server it runs on (see "Failover" in doc.go): the
// hash field serverField holds "replid,since" — the replication id of the
// server the namespace's writes went to, and when a quarantine began. A
// replica promoted by a failover, or a server restarted, has a new
// replication id and may lack acknowledged writes: the first acquisition
// there starts a quarantine in which no term that asks for a grace is
// granted for TTL + grace, so a holder whose term was lost has failed
// closed before a peer starts the key. A namespace with records but no
// such field (made before this check) starts one too: its history is
// unknown; so does an empty one that this client has seen before (ARGV[7]:
// a failover lost the namespace's first writes, or the server lost
// everything). One new to it and to this client does not. A client whose ACL
// denies INFO checks nothing and writes nothing, but keeps to a quarantine
// another client started.
//
//	ARGV: key, owner, ttl µs, grace µs, running 0|1, event channel,
//	      seen 0|1 (this client has had an answer from the namespace)
//	→ {1, epoch} or {0, epoch, owner, time left µs, running 0|1, live 0|1}
var acquireScript = goredis.NewScript(prelude + `
local key, owner = ARGV[1], ARGV[2]
local ttl, grace = tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_us()

-- A user whose ACL denies INFO (it is in @dangerous) gets no check, and
-- writes nothing: it keeps to a quarantine another client started.
local info = redis.pcall('INFO', 'replication')
local replid = nil
if type(info) == 'string' then
  replid = string.match(info, 'master_replid:(%w+)') or ''
end
local since = 0
local named = redis.call('HGET', KEYS[1], '` + luaServerField + `')
local id = nil
if named then
  local at
  id, at = string.match(named, '^(%w*),(%d+)$')
  since = tonumber(at) or now
end
if replid and id ~= replid then
  if named or ARGV[7] == '1' or redis.call('ZCARD', KEYS[2]) > 0 then
    since = now
  end
  redis.call('HSET', KEYS[1], '` + luaServerField + `', replid .. ',' .. int(since))
end

local v = redis.call('HGET', KEYS[1], key)
local e = nil
if v then
  local x, rel, run, o
  e, x, rel, run, o = decode(key, v)
  if not rel and o ~= owner and now < x + grace then
    local live = 0
    if o ~= '' and now < x then live = 1 end
    return {0, e, o, x - now, run and 1 or 0, live}
  end
end
if grace > 0 and now < since + ttl + grace then
  -- The quarantine blocks, as a term of nobody's would.
  local left = since + ttl - now
  return {0, e or redis.call('HGET', KEYS[1], '') or '0', '', left, 0, left > 0 and 1 or 0}
end
if not v then
  redis.call('ZADD', KEYS[2], 0, key)
  e = redis.call('HGET', KEYS[1], '') or nil -- the floor Prune left
end
local epoch = next_epoch(e, now)
redis.call('HSET', KEYS[1], key, encode(epoch, now + ttl, false, ARGV[5] == '1', owner))
redis.call('PUBLISH', ARGV[6], 'A\t' .. epoch .. '\t' .. owner .. '\t' .. key)
return {1, epoch}
`)

// serverField is the hash field that names the server (acquireScript). It
// starts with a byte no lease key holds, and is not in the sorted set, so
// List and Prune never see it. luaServerField is how the script writes it.
const (
	serverField    = "\x00server"
	luaServerField = `\0server`
)

// renewScript extends every listed live term of owner (rule 3).
//
//	ARGV: owner, ttl µs, then key, epoch, running 0|1 for each item
//	→ one 1 (renewed) or 0 (lost) per item
var renewScript = goredis.NewScript(prelude + `
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local now = now_us()
local res = {}
for i = 3, #ARGV, 3 do
  local key = ARGV[i]
  local ok = 0
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    if e == ARGV[i + 1] and o == owner and not rel and now < x then
      redis.call('HSET', KEYS[1], key, encode(e, now + ttl, false, ARGV[i + 2] == '1', o))
      ok = 1
    end
  end
  res[#res + 1] = ok
end
return res
`)

// releaseScript ends every listed current term of owner now (rule 4): the
// expiry becomes the moment of release, even for a term that had already
// expired. Each release is announced on the event channel.
//
//	ARGV: owner, event channel, then key, epoch for each term
//	→ number of terms released
var releaseScript = goredis.NewScript(prelude + `
local owner, channel = ARGV[1], ARGV[2]
local now = now_us()
local n = 0
for i = 3, #ARGV, 2 do
  local key = ARGV[i]
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    if e == ARGV[i + 1] and o == owner and not rel then
      redis.call('HSET', KEYS[1], key, encode(e, now, true, false, o))
      redis.call('PUBLISH', channel, 'R\t' .. e .. '\t' .. o .. '\t' .. key)
      n = n + 1
    end
  end
end
return n
`)

// revokeScript moves a live term to a new epoch owned by nobody. Its expiry
// is kept: the fenced holder may run until its own deadline without hearing
// of the revocation, so peers wait for expiry + grace as for any live term.
//
//	ARGV: key → 1 when revoked, 0 when the key had no live term
var revokeScript = goredis.NewScript(prelude + `
local key = ARGV[1]
local v = redis.call('HGET', KEYS[1], key)
if not v then
  return 0
end
local e, x, rel, run, o = decode(key, v)
local now = now_us()
if rel or o == '' or now >= x then
  return 0
end
redis.call('HSET', KEYS[1], key, encode(next_epoch(e, now), x, false, false, ''))
return 1
`)

// listScript reads one page of records in a lexicographic key range
// together with the server's clock, atomically.
//
//	ARGV: ZRANGEBYLEX min, max, page size
//	→ {now µs, first key of the next page or '', key1, record1, …}
var listScript = goredis.NewScript(prelude + `
local now = now_us()
local limit = tonumber(ARGV[3])
local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, limit + 1)
local next_key = ''
if #keys > limit then
  next_key = keys[limit + 1]
  keys[limit + 1] = nil
end
local out = {int(now), next_key}
-- HMGET in chunks: unpack is limited by the Lua C stack.
for i = 1, #keys, 500 do
  local j = math.min(i + 499, #keys)
  local vals = redis.call('HMGET', KEYS[1], unpack(keys, i, j))
  for k = 1, #vals do
    if vals[k] then
      out[#out + 1] = keys[i + k - 1]
      out[#out + 1] = vals[k]
    end
  end
end
return out
`)

// pruneScript deletes the records of one page of a key range whose term
// ended at least an age ago, raising the epoch floor to their epochs in
// the same atomic step.
//
//	ARGV: ZRANGEBYLEX min, max, age µs, page size
//	→ {deleted, last key of the page or '' when the range is done}
var pruneScript = goredis.NewScript(prelude + `
local now = now_us()
local age, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, limit)
local floor = tonumber(redis.call('HGET', KEYS[1], '') or '0')
local n = 0
for _, key in ipairs(keys) do
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x = decode(key, v)
    if x + age <= now then
      floor = math.max(floor, tonumber(e))
      redis.call('HDEL', KEYS[1], key)
      redis.call('ZREM', KEYS[2], key)
      n = n + 1
    end
  end
end
if n > 0 then
  redis.call('HSET', KEYS[1], '', int(floor))
end
local last = ''
if #keys == limit then
  last = keys[#keys]
end
return {n, last}
`)
