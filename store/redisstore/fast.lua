-- sluice: the token-bucket transition on plain doubles, for parameters and
-- states small enough that every intermediate is an exact integer below
-- 2^53 (checked at each step; the caller falls back to the limb model
-- when any check fails, so both give the same decision). Time is a pair
-- of 32-bit halves (nanoseconds since the Unix epoch exceed 2^53); the
-- virtual clock is V(e) = e*qn + floor((e*rn + phase)/den), where
-- num = qn*den + rn, which is floor((e*num + phase)/den) exactly.
local floor = math.floor
local T32 = 4294967296
local T52 = 4503599627370496
local T53 = 9007199254740992

local function split16(s, i)
  return tonumber(string.sub(s, i, i + 7), 16), tonumber(string.sub(s, i + 8, i + 15), 16)
end

local function hex2(h, l) return string.format('%08x%08x', h, l) end

local function dhex(x)
  local h = floor(x / T32)
  return string.format('%08x%08x', h, x - h * T32)
end

local function fdiv(x, den) -- floor and remainder of x / den, x < 2^53
  local q = floor(x / den)
  local r = x - q * den
  if r < 0 then q = q - 1; r = r + den elseif r >= den then q = q + 1; r = r - den end
  return q, r
end

-- fV returns V(e) and the remainder of its division, or nil. e*rn + phase
-- may exceed 2^53: then it is split as (eh*rn)*2^26 + (el*rn + phase).
local function fV(qn, rn, den, e, ph)
  local a = e * qn
  if a >= T52 then return nil end
  if den == 1 then return a, 0 end -- whole units per ns: V(e) = e*num exactly
  local f = e * rn + ph
  local q, r
  if f < T53 then
    q = floor(f / den)
    r = f - q * den
    if r < 0 then q = q - 1; r = r + den elseif r >= den then q = q + 1; r = r - den end
  else
    local eh = floor(e / 67108864)
    local A = eh * rn
    if A >= T53 then return nil end
    local qa, ra = fdiv(A, den)
    local qx
    qx, r = fdiv(ra * 67108864 + (e - eh * 67108864) * rn + ph, den)
    q = qa * 67108864 + qx
  end
  local v = a + q
  if v >= T52 then return nil end
  return v, r
end

-- fwait is wait: the ns from elapsed time (eneg, e) until V >= target,
-- found as the least x with V(x) >= target, from a floating estimate.
local function fwait(qn, rn, den, num, target, eneg, e, ph)
  if target <= 0 then return 0 end
  if den == 1 and target < T52 then
    -- V(x) = x*num: the least x with x*num >= target is its ceiling.
    local x, r = fdiv(target, num)
    if r > 0 then x = x + 1 end
    if eneg then
      if x + e >= T52 then return nil end
      return x + e
    end
    if x <= e then return 0 end
    return x - e
  end
  local x = floor((target * den - ph) / num)
  if x < 0 then x = 0 end
  if x >= T52 then return nil end
  local v = fV(qn, rn, den, x, ph)
  if not v then return nil end
  local n = 0
  if v >= target then
    while x > 0 do -- down while the one before is still enough
      local w = fV(qn, rn, den, x - 1, ph)
      if not w or n > 64 then return nil end
      if w < target then break end
      x, n = x - 1, n + 1
    end
  else
    repeat
      x, n = x + 1, n + 1
      v = fV(qn, rn, den, x, ph)
      if not v or n > 64 then return nil end
    until v >= target
  end
  if eneg then
    if x + e >= T52 then return nil end
    return x + e
  end
  if x <= e then return 0 end
  return x - e
end

-- fbucket is store.BucketState then bucket.Params.Step on a state (tat,
-- origin high and low halves, phase) or none (new). Returns nil, or
-- allowed, remaining, retry, reset and the new state's four fields.
local function fbucket(F, has, tat, oh, ol, ph, nh, nl, cost)
  local qn, rn, den = F.qn, F.rn, F.den
  if not has then
    tat, oh, ol, ph = 0, nh, nl, 0
  else
    local d = (nh - oh) * T32 + (nl - ol) -- exact while |nh - oh| < 2^20
    if d > 0 and d * F.num / den > tat * 1.000001 + 16 then
      -- Surely full (V(d) > tat even allowing for rounding): the same
      -- as new, whatever d's size.
      tat, oh, ol, ph = 0, nh, nl, 0
    else
      if nh - oh >= 1048576 or oh - nh >= 1048576 then return nil end
      local dh, dl = nh, nl
      if d < 0 then d, dh, dl = 0, oh, ol end -- a stale time counts as the origin
      if d > F.M then return nil end          -- past MaxElapsed: a rebase (limb model)
      local v = fV(qn, rn, den, d, ph)
      if not v then return nil end
      if tat <= v then tat, oh, ol, ph = 0, dh, dl, 0 end -- full: the same as new
    end
  end
  local e = (nh - oh) * T32 + (nl - ol)
  local eneg, ea = e < 0, e
  local v, r
  if eneg then
    ea = -e
    v, r = fV(qn, rn, den, 0, ph)
  else
    v, r = fV(qn, rn, den, e, ph)
  end
  if not v then return nil end
  local full = tat <= v
  local base = tat
  if full then
    base = v
    if r > 0 then base = v + 1 end
  end
  local k2, C, num = F.k2, F.C, F.num
  local nt = base + cost * k2
  local cv = C + v
  if nt >= T53 or cv >= T53 then return nil end
  if full or nt <= cv then
    local rem = 0
    if nt <= cv then rem = fdiv(cv - nt, k2) end
    local reset = fwait(qn, rn, den, num, nt, eneg, ea, ph)
    if not reset then return nil end
    if cost == 0 then return true, rem, 0, reset, tat, oh, ol, ph end
    if not eneg then
      -- Rebase to now (exact, as bucket.Params.Rebase: the new origin
      -- keeps the clock's phase), so that the next decision's elapsed
      -- time is short and its products stay below 2^53.
      return true, rem, 0, reset, nt - v, nh, nl, r
    end
    return true, rem, 0, reset, nt, oh, ol, ph
  end
  local rem = 0
  if base <= cv then rem = fdiv(cv - base, k2) end
  local retry = fwait(qn, rn, den, num, nt - C, eneg, ea, ph)
  if not retry then return nil end
  local reset = fwait(qn, rn, den, num, base, eneg, ea, ph)
  if not reset then return nil end
  return false, rem, retry, reset, tat, oh, ol, ph
end

-- The penalty box (store.Spec.Penalize): the value of a key that is
-- blocked is '!', the block's end (16 hex digits of ns on the store's
-- clock), then its state as ever (or nothing). A block is in force while
-- the clock is before its end. BLK holds this call's blocks in force, by
-- key ({end, ns left}), noted when a state is read (unblock) and put back
-- by every write of it (fstore, save, drop), so that a block outlives any
-- write before its end and its key lives at least that long; NOWHEX is
-- the call's clock. take.lua and adjust.lua set both at each call.
local BLK, NOWHEX = nil, '' -- (BLK: nil until a call notes a block)

-- The spec marker (store.SpecConverter): a state written under a spec
-- that is not its key's usual one (an override's: the item came with
-- another spec as its base) is preceded, after any block, by '@', a digit
-- n and n fields of 16 hex digits naming that spec's parameters (markof);
-- a state without one was written under its key's usual spec. MRK holds
-- the marker each key's writes in this call carry (set by respec, before
-- every decision and adjustment of a key; nil: none; MRK itself is nil
-- until a call marks a key, so that most calls make no table). G1k and G1v are a
-- one-shot cache of the value respec read (key, value), which the
-- decision's own read (getv) then takes instead of a second GET. take.lua
-- and adjust.lua reset all three at each call.
local MRK, G1k, G1v = nil, nil, nil

-- getv is GET key, or the value respec just read of it.
local function getv(key)
  if G1k == key then
    G1k = nil
    return G1v
  end
  return redis.call('GET', key)
end

-- unblock returns the state part of value s of key (nil when none),
-- noting in BLK a block in force, and without its spec marker.
local function unblock(key, s)
  if not s then return s end
  local c = string.byte(s, 1)
  if c == 33 then -- '!'
    local u = string.sub(s, 2, 17)
    if u > NOWHEX then
      local uh, ul = split16(u, 1)
      local nh, nl = split16(NOWHEX, 1)
      BLK = BLK or {}
      BLK[key] = {u, (uh - nh) * T32 + (ul - nl)}
    end
    s = string.sub(s, 18)
    c = string.byte(s, 1)
  end
  if c == 64 then s = string.sub(s, 3 + 16 * tonumber(string.sub(s, 2, 2))) end -- '@'
  if s == '' then return nil end
  return s
end

-- markof is the marker of the spec whose parameters are at A[at] (kind
-- letter kind): a token bucket's unit, capacity, rate num and den and
-- MaxElapsed (the limb path's fixed point); a window's length; another
-- kind's seventh field (a quota's: its period and zone, hashed).
local function markof(kind, at)
  if kind == 'b' then return '@5' .. A[at] .. A[at + 1] .. A[at + 2] .. A[at + 3] .. A[at + 4] end
  if kind == 's' or kind == 'f' then return '@1' .. A[at + 1] end
  return '@1' .. A[at + 5]
end

-- respec reads key for a decision or adjustment under the spec at A[at]
-- (kind letter kind; bmk: the marker of the key's usual spec when the
-- spec is an override of it, else nil) and returns the marker of the
-- spec the key's state was written under when it is another one (nil:
-- nothing to convert): its own marker's, else the usual spec's (bmk;
-- without bmk, the spec's own, as states written before markers existed
-- read). The caller then converts it (model.lua's respec). It sets
-- MRK[key], the marker the key's writes carry, and leaves what it read in
-- the one-shot cache.
local function respec(kind, at, bmk, key)
  local raw = redis.call('GET', key)
  G1k, G1v = key, raw
  if not bmk then
    -- the common case: the key's usual spec, and a state with no marker
    if MRK then MRK[key] = nil end
    if not raw then return nil end
    local c = string.byte(raw, 1)
    if c == 33 then c = string.byte(raw, 18) end
    if c ~= 64 then return nil end
  end
  MRK = MRK or {}
  MRK[key] = nil
  if not raw then
    if bmk ~= markof(kind, at) then MRK[key] = markof(kind, at) end
    return nil
  end
  local p = 1
  if string.byte(raw, 1) == 33 then p = 18 end
  local marked = string.byte(raw, p) == 64
  if not marked and not bmk then return nil end
  local own = markof(kind, at)
  local from = bmk
  if marked then from = string.sub(raw, p, p + 1 + 16 * tonumber(string.sub(raw, p + 1, p + 1))) end
  if bmk and bmk ~= own then MRK[key] = own end
  if from == own then return nil end
  return from
end

-- blockof is key's block in force as noted by unblock: the prefix to
-- write before its state ('' when none) and the ns it has left (0).
local function blockof(key)
  local b = BLK and BLK[key]
  if not b then return '', 0 end
  return '!' .. b[1], b[2]
end

-- fload reads a bucket state for fbucket: nil when absent, false when it
-- does not fit the double path; else the state and the key's expiry (Unix
-- ms, nil when unknown). States written by the double path are 'B' and
-- five packed doubles (tat, origin high, origin low, phase, expiry); those
-- of the limb path 'b' and hex.
local function fload(s)
  if not s then return nil end
  if #s == 41 then
    local c, tat, oh, ol, ph, exp = struct.unpack('<Bddddd', s)
    if c == 66 then return true, tat, oh, ol, ph, exp end -- 'B'
    return nil
  end
  if #s ~= 49 or string.byte(s, 1) ~= 98 then return nil end -- 'b' 
  local th, tl = split16(s, 2)
  local oh, ol = split16(s, 18)
  local pq, pl = split16(s, 34)
  if th >= 1048576 or pq ~= 0 then return false end
  return true, th * T32 + tl, oh, ol, pl
end

-- fstore writes a double-path state. With expire, the key expires about
-- a second after its bucket is full again (when it equals a new key): the
-- expiry is extended only when the bucket's own deadline passes it, so
-- most writes keep the TTL (cheaper than setting one).
local function fstore(key, tat, oh, ol, ph, reset, nowms, oldexp, expire)
  local pre, left = blockof(key)
  if MRK and MRK[key] then pre = pre .. MRK[key] end
  if not expire then
    redis.call('SET', key, pre .. struct.pack('<Bddddd', 66, tat, oh, ol, ph, 0))
    return
  end
  local need = nowms + math.ceil(math.max(reset, left) / 1000000)
  if oldexp and oldexp >= need and oldexp <= need + 2000 then
    redis.call('SET', key, pre .. struct.pack('<Bddddd', 66, tat, oh, ol, ph, oldexp), 'KEEPTTL')
    return
  end
  local exp = need + 1000
  redis.call('SET', key, pre .. struct.pack('<Bddddd', 66, tat, oh, ol, ph, exp), 'PX', string.format('%d', exp - nowms))
end
-- now as 32-bit halves, from ARGV or Redis TIME (s*1e9 = s*1953125*2^9,
-- exact below 2^53 before the shift).
local function now2(arg)
  if arg ~= '' then return split16(arg, 1) end
  local t = redis.call('TIME')
  local v = tonumber(t[1]) * 1953125
  local vh = floor(v / 8388608)
  local lo = (v - vh * 8388608) * 512 + tonumber(t[2]) * 1000
  local c = floor(lo / T32)
  return vh + c, lo - c * T32
end
