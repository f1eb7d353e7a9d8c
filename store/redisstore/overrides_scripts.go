// The Lua scripts of the overrides store: put, delete and changes, each
// one atomic call on the four keys of the overrides' hash slot.

package redisstore

import "github.com/redis/rueidis"

// Every overrides script takes the same KEYS, all in one hash slot:
//
//	KEYS[1] meta: a hash of e (the epoch: a random number set with the
//	        first change, so that a store emptied and written again is
//	        never taken for the one before), v (the change counter, one
//	        HINCRBY per change), f (the counter of the newest change
//	        trimmed from the log: older sinces get Full answers)
//	KEYS[2] records: a hash, field (name NUL canonical match) -> the
//	        record's JSON (overrides.Override.MarshalJSON)
//	KEYS[3] expiries: a sorted set of the fields of records with an
//	        expiry, scored by it (Unix milliseconds)
//	KEYS[4] log: a sorted set of the fields changed, each scored by the
//	        counter of its last change, trimmed to the log size
//
// A record expires at its expiry exactly: the first script that runs at
// or after it deletes it as a change of its own (logged, so that every
// instance hears of it). At maxmemory (noeviction) Redis refuses a
// script's first write that may grow memory: expiries then wait (Changes
// still answers, read-only), Put is refused (OOM) with nothing written,
// and Delete still deletes (its first write, HDEL, frees memory).
const overridesLib = `
local function now_ms(arg)
  if arg ~= '' then return tonumber(arg) end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- bump counts n changes and returns the counter of the first; a store
-- without an epoch takes cand (and starts a new log). Soft, it is the
-- script's first write and returns nil when Redis refuses it (OOM: at
-- maxmemory a script's first write that may grow memory is refused, and
-- nothing is written).
local function bump(n, cand, soft)
  local call = redis.call
  if soft then call = redis.pcall end
  local new = call('HSETNX', KEYS[1], 'e', cand)
  if type(new) == 'table' then return nil end
  if new == 1 then
    redis.call('HDEL', KEYS[1], 'v', 'f')
    redis.call('DEL', KEYS[4])
  end
  local v = call('HINCRBY', KEYS[1], 'v', n)
  if type(v) == 'table' then return nil end
  return v - n + 1
end
local function trim(size)
  local over = redis.call('ZCARD', KEYS[4]) - size
  if over > 0 then
    local gone = redis.call('ZPOPMIN', KEYS[4], over)
    redis.call('HSET', KEYS[1], 'f', gone[#gone])
  end
end
local function expire(now, cand, size)
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
  if #due == 0 then return end
  local v = bump(#due, cand, true)
  if not v then return end -- at maxmemory: expired records stay until memory is freed
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  for i, f in ipairs(due) do
    redis.call('HDEL', KEYS[2], f)
    redis.call('ZADD', KEYS[4], v + i - 1, f)
  end
  trim(size)
end
`

// overridesPut: ARGV field, head, created, tail, expiry (ms, or empty), max,
// log size, now (ms, or empty: Redis TIME), epoch candidate, channel. The
// record stored is head .. created .. tail, where created is the live
// record's created_at when there is one; the change is announced on
// channel (PUBLISH epoch:counter). Returns {-1} at the cap (nothing
// changed, nothing published), else {epoch, counter, record}.
var overridesPut = rueidis.NewLuaScript(overridesLib + `
local size = tonumber(ARGV[7])
expire(now_ms(ARGV[8]), ARGV[9], size)
local old = redis.call('HGET', KEYS[2], ARGV[1])
if not old and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[6]) then return {-1} end
local created = ARGV[3]
if old then
  local ok, rec = pcall(cjson.decode, old)
  if ok and type(rec) == 'table' and type(rec.created_at) == 'string' and string.match(rec.created_at, '^[0-9TZ:.+-]+$') then
    created = '"' .. rec.created_at .. '"'
  end
end
local rec = ARGV[2] .. created .. ARGV[4]
redis.call('HSET', KEYS[2], ARGV[1], rec)
if ARGV[5] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[5], ARGV[1])
else
  redis.call('ZREM', KEYS[3], ARGV[1])
end
local v = bump(1, ARGV[9])
redis.call('ZADD', KEYS[4], v, ARGV[1])
trim(size)
local e = redis.call('HGET', KEYS[1], 'e')
redis.call('PUBLISH', ARGV[10], e .. ':' .. v)
return {e, v, rec}
`)

// overridesDelete: ARGV field, log size, now, epoch candidate, channel.
// Returns 0 when there is no live record of field (nothing changed,
// nothing published), else 1, the change announced on channel as Put's.
var overridesDelete = rueidis.NewLuaScript(overridesLib + `
local size = tonumber(ARGV[2])
expire(now_ms(ARGV[3]), ARGV[4], size)
if redis.call('HDEL', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('ZREM', KEYS[3], ARGV[1])
local v = bump(1, ARGV[4])
redis.call('ZADD', KEYS[4], v, ARGV[1])
trim(size)
redis.call('PUBLISH', ARGV[5], redis.call('HGET', KEYS[1], 'e') .. ':' .. v)
return 1
`)

// overridesChanges: ARGV since's epoch, since's counter, page size, now,
// epoch candidate, log size. After expiring what is due, returns
// {epoch, counter, mode, data}:
//
//	mode 0: data is the log after since's counter, at most a page of it:
//	        field, record ('' when deleted), counter; ...
//	mode 1: Full, and data is every record (field, record; ...): the
//	        records fit in a page
//	mode 2: Full, the records do not fit in a page (the caller scans)
//
// Full when since's counter is 0, its epoch is not the store's, or its
// counter is newer than the store's or older than the log.
var overridesChanges = rueidis.NewLuaScript(overridesLib + `
local page = tonumber(ARGV[3])
expire(now_ms(ARGV[4]), ARGV[5], tonumber(ARGV[6]))
local m = redis.call('HMGET', KEYS[1], 'e', 'v', 'f')
local e, v, f = m[1] or '0', tonumber(m[2] or 0), tonumber(m[3] or 0)
local since = tonumber(ARGV[2])
if since == 0 or ARGV[1] ~= e or since > v or since < f then
  if redis.call('HLEN', KEYS[2]) <= page then return {e, v, 1, redis.call('HGETALL', KEYS[2])} end
  return {e, v, 2, {}}
end
local log = redis.call('ZRANGEBYSCORE', KEYS[4], '(' .. ARGV[2], '+inf', 'WITHSCORES', 'LIMIT', 0, page)
local out = {}
for i = 1, #log, 2 do
  out[#out + 1] = log[i]
  out[#out + 1] = redis.call('HGET', KEYS[2], log[i]) or ''
  out[#out + 1] = log[i + 1]
end
return {e, v, 0, out}
`)
