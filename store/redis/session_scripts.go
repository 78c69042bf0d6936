package redis

import goredis "github.com/redis/go-redis/v9"

// The scripts of sessions (session.go). Every one gets the three keys of
// scripts.go. Session ids are drawn at random by the client (below 2^51,
// so that on_session + id stays exact in Lua's doubles); a script that
// makes a session refuses an id already taken.

// openSessionScript makes session id of owner, empty and live for a TTL.
//
//	ARGV: id, owner, ttl µs, tag → {1, version, tag}, or {0} when the id
//	is taken
var openSessionScript = goredis.NewScript(prelude + `
if redis.call('HEXISTS', KEYS[3], ARGV[1]) == 1 then
  return {0}
end
save({id = ARGV[1], x = now_us() + tonumber(ARGV[3]), n = 1, tag = ARGV[4], prev = '0', records = 0, owner = ARGV[2]})
return {1, 1, ARGV[4]}
`)

// ownedEnd is a Lua function the renewal scripts share: when the term of a
// record of owner with expiry x ends, on its own record or on a session of
// owner (nil when on a session of another owner, or one gone).
const ownedEnd = `
local function owned_end(x, owner)
  local from = session_of(x)
  if not from then
    return x
  end
  local f = session(from)
  return f and f.owner == owner and f.x or nil
end
`

// renewFastScript renews a session alone, when it is live and at the
// version and tag its Store knows: every term on it then lives a TTL more
// without its record being read. It also writes the runner state of the
// terms on it whose state changed, and puts on it the terms acquired since
// that are still the owner's, unreleased and live — on their own records,
// or on another live session of the owner, which a concurrent renewal
// term by term opened. Putting terms on moves the session (and any a term
// left) one version up.
//
//	ARGV: id, owner, ttl µs, version, tag, new tag, number of changed
//	      terms, then key, epoch, running 0|1 for each changed term and
//	      then for each term to put on
//	→ {0} (not live, or not at that version: nothing written), or
//	  {1, version, tag, then key, epoch of each term put on}
var renewFastScript = goredis.NewScript(prelude + ownedEnd + `
local id, owner, ttl = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_us()
local s = session(id)
if not s or s.owner ~= owner or now >= s.x or int(s.n) ~= ARGV[4] or s.tag ~= ARGV[5] then
  return {0}
end
local on = on_session + tonumber(id)
local joins = 8 + 3 * tonumber(ARGV[7])
for i = 8, joins - 1, 3 do
  local key = ARGV[i]
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    if e == ARGV[i + 1] and x == on and o == owner and not rel then
      redis.call('HSET', KEYS[1], key, encode(e, on, false, ARGV[i + 2] == '1', o))
    end
  end
end
local out = {1, 0, 0}
local top = now + ttl
for i = joins, #ARGV, 3 do
  local key = ARGV[i]
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    local mine = e == ARGV[i + 1] and o == owner and not rel
    local from, ends = session_of(x), mine and owned_end(x, owner)
    if mine and from == id then
      -- Put on meanwhile, by a renewal that ran first.
      out[#out + 1] = key
      out[#out + 1] = e
    elseif ends and now < ends then
      if from then
        leave(from, ARGV[6])
      end
      redis.call('HSET', KEYS[1], key, encode(e, on, false, ARGV[i + 2] == '1', o))
      s.records = s.records + 1
      top = math.max(top, ends)
      moved(s, ARGV[6])
      out[#out + 1] = key
      out[#out + 1] = e
    end
  end
end
s.x = math.max(s.x, top)
save(s)
out[2], out[3] = int(s.n), s.tag
return out
`)

// moveScript is one call of a renewal term by term (session.go): it puts
// each listed term of owner that is still its, unreleased and live — on
// its own record or on another session of owner — on session id, which
// the first call of the renewal makes. A term's end never comes sooner
// for the move: the session lives at least as long as any term put on it,
// and a TTL more. The session moves one version up, and so does each
// session a term left; the terms of those sessions that no renewal lists
// stay on them and end with them.
//
//	ARGV: id, owner, ttl µs, new tag, then key, epoch, running 0|1 for
//	      each term
//	→ {0} (the session is another owner's, or dead: nothing written), or
//	  {1, version, tag, prev tag, then key, epoch, running 0|1 of each
//	  listed term on the session}
var moveScript = goredis.NewScript(prelude + ownedEnd + `
local id, owner, ttl, tag = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local now = now_us()
local s = session(id)
if not s then
  s = {id = id, x = now + ttl, n = 0, tag = '0', prev = '0', records = 0, owner = owner}
  sessions[id] = s
elseif s.owner ~= owner or now >= s.x then
  return {0}
end
local on = on_session + tonumber(id)
local top = now + ttl
local out = {1, 0, 0, 0}
for i = 5, #ARGV, 3 do
  local key = ARGV[i]
  local v = redis.call('HGET', KEYS[1], key)
  if v then
    local e, x, rel, run, o = decode(key, v)
    local running = ARGV[i + 2] == '1'
    if e == ARGV[i + 1] and o == owner and not rel then
      local from, ends = session_of(x), owned_end(x, owner)
      if from == id then
        if running ~= run then
          redis.call('HSET', KEYS[1], key, encode(e, on, false, running, o))
        end
      elseif ends and now < ends then
        if from then
          leave(from, tag)
        end
        redis.call('HSET', KEYS[1], key, encode(e, on, false, running, o))
        s.records = s.records + 1
        top = math.max(top, ends)
      else
        e = nil -- lost
      end
      if e then
        out[#out + 1] = key
        out[#out + 1] = e
        out[#out + 1] = ARGV[i + 2]
      end
    end
  end
end
s.x = math.max(s.x, top)
moved(s, tag)
save(s)
out[2], out[3], out[4] = int(s.n), s.tag, s.prev
return out
`)

// pruneSessionsScript deletes, among one HSCAN page of sessions, those
// dead at least an age ago that no record is on.
//
//	ARGV: HSCAN cursor, age µs, page size → {next cursor, deleted}
var pruneSessionsScript = goredis.NewScript(prelude + `
local now, age = now_us(), tonumber(ARGV[2])
local page = redis.call('HSCAN', KEYS[3], ARGV[1], 'COUNT', ARGV[3])
local n = 0
for i = 1, #page[2], 2 do
  local s = session(page[2][i])
  if s.records <= 0 and s.x + age <= now then
    redis.call('HDEL', KEYS[3], s.id)
    n = n + 1
  end
end
return {page[1], n}
`)
