package redis

import goredis "github.com/redis/go-redis/v9"

// Every script gets the same three keys, which share the namespace's hash
// tag and therefore one Cluster slot:
//
//	KEYS[1] = {ns}:leases    hash, field = lease key, value = packed record
//	KEYS[2] = {ns}:keys      sorted set of lease keys (all scores 0), so List
//	                          reads a byte-ordered prefix range without HSCAN
//	KEYS[3] = {ns}:sessions  hash, field = session id, value = packed
//	                          session (session.go)
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

-- Sessions (session.go). A record on session id has the expiry
-- on_session + id, which a version without sessions reads as a date a
-- century ahead; its term ends when the session does. A packed session is
-- "expiry,version,tag,prev,records,owner": prev is the tag it had at the
-- version before, records how many records are on it. sessions caches
-- what this call read or wrote.
local on_session = ` + onSessionLua + `
local sessions = {}

local function session(id)
  local s = sessions[id]
  if s == nil then
    s = false
    local v = redis.call('HGET', KEYS[3], id)
    if v then
      local x, n, tag, prev, c, owner = string.match(v, '^(%-?%d+),(%d+),(%d+),(%d+),(%-?%d+),(.*)$')
      if not x then
        error('tenure: corrupt session ' .. id)
      end
      s = {id = id, x = tonumber(x), n = tonumber(n), tag = tag, prev = prev, records = tonumber(c), owner = owner}
    end
    sessions[id] = s
  end
  return s
end

local function save(s)
  if s.records <= 0 and s.empty_goes then
    -- No record is on it any more: nothing to end with it (and the
    -- Store that renews it opens another when it finds it gone).
    redis.call('HDEL', KEYS[3], s.id)
    return
  end
  redis.call('HSET', KEYS[3], s.id,
    int(s.x) .. ',' .. int(s.n) .. ',' .. s.tag .. ',' .. s.prev .. ',' .. int(s.records) .. ',' .. s.owner)
end

-- session_of returns the id of the session a record's expiry puts it on,
-- or nil for a record on its own.
local function session_of(x)
  if x < on_session then
    return nil
  end
  return int(x - on_session)
end

-- expiry is when a record's term ends: its own expiry, or its session's.
-- A session that is gone (only a hand or an eviction removes one that
-- records are on) gives nil: the caller decides.
local function expiry(x)
  local id = session_of(x)
  if not id then
    return x
  end
  local s = session(id)
  return s and s.x or nil
end

-- moved moves session s one version up, once per call whatever the number
-- of terms it puts on or takes off, with the call's new tag. The caller
-- saves s.
local function moved(s, tag)
  if not s.moved then
    s.n, s.prev, s.tag, s.moved = s.n + 1, s.tag, tag, true
  end
end

-- leave counts a record off session id (the caller rewrites the record)
-- and moves the session; it returns the session, or nil when it is gone.
-- A session the last record left is deleted.
local function leave(id, tag)
  local s = session(id)
  if s then
    s.records, s.empty_goes = s.records - 1, true
    moved(s, tag)
    save(s)
  end
  return s
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
// A record on a session ends with it; one whose session is gone (only a
// hand or an eviction removes a session records are on) cannot say when
// its term ends, so it becomes a term on its own record that ends a TTL
// from now, as a quarantine would treat it. An acquisition takes the
// key's record off the session it was on.
//
//	ARGV: key, owner, ttl µs, grace µs, running 0|1, event channel,
//	      seen 0|1 (this client has had an answer from the namespace),
//	      tag (for the session the record leaves)
//	→ {1, epoch[, session left, its version, tag, prev tag]}
//	  or {0, epoch, owner, time left µs, running 0|1, live 0|1}
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
local e, on = nil, nil
if v then
  local x, rel, run, o
  e, x, rel, run, o = decode(key, v)
  on = session_of(x)
  x = expiry(x)
  if not x then
    x = now + ttl
    redis.call('HSET', KEYS[1], key, encode(e, x, rel, run, o))
    on = nil
  end
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
if on then
  local s = leave(on, ARGV[8])
  if s then
    return {1, epoch, on, int(s.n), s.tag, s.prev}
  end
end
return {1, epoch}
`)

// serverField is the hash field that names the server (acquireScript). It
// starts with a byte no lease key holds, and is not in the sorted set, so
// List and Prune never see it. luaServerField is how the script writes it.
const (
	serverField    = "\x00server"
	luaServerField = `\0server`
)

// releaseScript ends every listed current term of owner now (rule 4): the
// expiry becomes the moment of release, even for a term that had already
// expired, and the record leaves its session. Each release is announced
// on the event channel.
//
//	ARGV: owner, event channel, tag (for the sessions terms leave), then
//	      key, epoch for each term
//	→ {number of sessions, then id, version, tag, prev tag of each}
var releaseScript = goredis.NewScript(prelude + `
local owner, channel = ARGV[1], ARGV[2]
local now = now_us()
local left = {}
for i = 4, #ARGV, 2 do
  local key = ARGV[i]
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    if e == ARGV[i + 1] and o == owner and not rel then
      local on = session_of(x)
      if on then
        local s = leave(on, ARGV[3])
        if s and not left[on] then
          left[on] = s
        end
      end
      redis.call('HSET', KEYS[1], key, encode(e, now, true, false, o))
      redis.call('PUBLISH', channel, 'R\t' .. e .. '\t' .. o .. '\t' .. key)
    end
  end
end
local out = {0}
for id, s in pairs(left) do
  out[1] = out[1] + 1
  out[#out + 1] = id
  out[#out + 1] = int(s.n)
  out[#out + 1] = s.tag
  out[#out + 1] = s.prev
end
return out
`)

// revokeScript moves a live term to a new epoch owned by nobody. Its expiry
// is kept (a term on a session takes the session's as it stands, and
// leaves it): the fenced holder may run until its own deadline without
// hearing of the revocation, so peers wait for expiry + grace as for any
// live term. A record whose session is gone is not revoked (the next
// acquisition gives it an end: acquireScript).
//
//	ARGV: key, tag (for the session the record leaves)
//	→ {0} when the key had no live term, {1[, session left, its version,
//	  tag, prev tag]} when revoked
var revokeScript = goredis.NewScript(prelude + `
local key = ARGV[1]
local v = redis.call('HGET', KEYS[1], key)
if not v then
  return {0}
end
local e, x, rel, run, o = decode(key, v)
local on = session_of(x)
x = expiry(x)
local now = now_us()
if not x or rel or o == '' or now >= x then
  return {0}
end
redis.call('HSET', KEYS[1], key, encode(next_epoch(e, now), x, false, false, ''))
if on then
  local s = leave(on, ARGV[2])
  return {1, on, int(s.n), s.tag, s.prev}
end
return {1}
`)

// listScript reads one page of records in a lexicographic key range
// together with the server's clock and the sessions (session.go),
// atomically: a record on a session reads as its session's end. With a
// thousand sessions or fewer (a few per live process), they all come with
// the page, which costs the script nothing per record; with more, the
// sessions the page's records are on.
//
//	ARGV: ZRANGEBYLEX min, max, page size
//	→ {now µs, first key of the next page or '', number of sessions,
//	   key1, record1, …, then id, packed session of each session}
var listScript = goredis.NewScript(prelude + `
local now = now_us()
local limit = tonumber(ARGV[3])
local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, limit + 1)
local next_key = ''
if #keys > limit then
  next_key = keys[limit + 1]
  keys[limit + 1] = nil
end
local out = {int(now), next_key, 0}
local all = redis.call('HLEN', KEYS[3]) <= 1000
local on = {}
-- HMGET in chunks: unpack is limited by the Lua C stack.
for i = 1, #keys, 500 do
  local j = math.min(i + 499, #keys)
  local vals = redis.call('HMGET', KEYS[1], unpack(keys, i, j))
  for k = 1, #vals do
    local v = vals[k]
    if v then
      if not all then
        local id = session_of(tonumber(string.match(v, '^%d+,(%d+),') or 0))
        if id then
          on[id] = true
        end
      end
      out[#out + 1] = keys[i + k - 1]
      out[#out + 1] = v
    end
  end
end
local sessions = {}
if all then
  sessions = redis.call('HGETALL', KEYS[3])
else
  for id in pairs(on) do
    local v = redis.call('HGET', KEYS[3], id)
    if v then
      sessions[#sessions + 1] = id
      sessions[#sessions + 1] = v
    end
  end
end
for _, v in ipairs(sessions) do
  out[#out + 1] = v
end
out[3] = #sessions / 2
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
    local on, ends = session_of(x), expiry(x)
    if ends and ends + age <= now then
      floor = math.max(floor, tonumber(e))
      redis.call('HDEL', KEYS[1], key)
      redis.call('ZREM', KEYS[2], key)
      if on then
        local s = session(on)
        s.records, s.empty_goes = s.records - 1, true
        save(s)
      end
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
