-- sluice: the limit transitions, line for line those of bucket.Params,
-- store.BucketState and window.Limit (Go), on exact limbs. Signed
-- quantities appear only as elapsed times (a stale clock can put "now"
-- before a state's origin); they are a sign flag and a magnitude.

-- P: a token bucket's parameters: U (units per token), C (capacity units),
-- num, den (rate in units per ns), M (MaxElapsed).

-- units returns floor and remainder of (e*num + phase) / den, with e
-- clamped to [0, M].
local function units(P, eneg, e, phase)
  if eneg then e = ZERO elseif cmp(e, P.M) > 0 then e = P.M end
  return divmod(add(mul(e, P.num), phase), P.den)
end

-- wait returns the ns from elapsed time (eneg, e) until V >= target.
local function wait(P, target, eneg, e, phase)
  if #target == 0 then return ZERO end
  local x = sub(mul(target, P.den), phase)
  local q, r = divmod(x, P.num)
  if #r > 0 then q = add(q, ONE) end
  if cmp(q, MAXINT) > 0 then return MAXINT end
  if eneg then return add(q, e) end
  if cmp(q, e) <= 0 then return ZERO end
  return sub(q, e)
end

-- bstate is store.BucketState: the state (tat, origin, phase) brought to
-- time d; st is nil for a key with no state.
local function bstate(P, st, d)
  if not st then return ZERO, d, ZERO end
  local tat, origin, phase = st[1], st[2], st[3]
  if cmp(d, origin) < 0 then d = origin end
  while true do
    local el = sub(d, origin)
    if cmp(el, P.M) <= 0 then break end
    -- bucket.Params.Rebase
    local v = units(P, false, P.M, phase)
    if cmp(tat, v) <= 0 then
      tat, origin, phase = ZERO, add(origin, el), ZERO
    else
      local q, r = divmod(add(mul(P.M, P.num), phase), P.den)
      origin = add(origin, P.M)
      if cmp(tat, q) <= 0 then tat, phase = ZERO, ZERO else tat, phase = sub(tat, q), r end
    end
  end
  local v = units(P, false, sub(d, origin), phase)
  if cmp(tat, v) <= 0 then return ZERO, d, ZERO end
  return tat, origin, phase
end

-- elapsed returns now - origin as (negative, magnitude).
local function elapsed(now, origin)
  if cmp(now, origin) < 0 then return true, sub(origin, now) end
  return false, sub(now, origin)
end

-- bstep is bucket.Params.Step: new tat, allowed, remaining, retry, reset.
local function bstep(P, tat, eneg, e, phase, cost)
  local v, r = units(P, eneg, e, phase)
  local full = cmp(tat, v) <= 0
  local base = tat
  if full then
    base = v
    if #r > 0 then base = add(v, ONE) end
  end
  local nt = add(base, mul(cost, P.U))
  local cv = add(P.C, v)
  -- (a class's view, P.R, admits from a full bucket only a cost within
  -- its capacity: bucket.Params.StepReserved)
  if ((full and (not P.R or cmp(mul(cost, P.U), P.C) <= 0)) or cmp(nt, cv) <= 0) and cmp(nt, MAXSTATE) <= 0 then
    local rem = ZERO
    if cmp(nt, cv) <= 0 then rem = (divmod(sub(cv, nt), P.U)) end
    local reset = wait(P, nt, eneg, e, phase)
    if #cost == 0 then nt = tat end
    return nt, true, rem, ZERO, reset
  end
  local rem = ZERO
  if cmp(base, cv) <= 0 then rem = (divmod(sub(cv, base), P.U)) end
  return tat, false, rem, wait(P, sub(nt, P.C), eneg, e, phase), wait(P, base, eneg, e, phase)
end

-- bbase is the base of a booking (bucket.Params.base): tat while not
-- full, else V rounded up.
local function bbase(P, tat, eneg, e, phase)
  local v, r = units(P, eneg, e, phase)
  if cmp(tat, v) > 0 then return tat end
  if #r > 0 then return add(v, ONE) end
  return v
end

-- window: split now into (index, elapsed in window).
local function wsplit(now, W) return divmod(now, W) end

-- wslide is window.Limit.Sliding. st = {idx, prev, curr} or nil.
local function wslide(N, W, st, now, cost)
  local idx, e = wsplit(now, W)
  local prev, curr
  if st then
    local c = cmp(idx, st[1])
    if c < 0 then idx, e, prev, curr = st[1], ZERO, st[2], st[3]
    elseif c == 0 then prev, curr = st[2], st[3]
    elseif cmp(idx, add(st[1], ONE)) == 0 then prev, curr = st[3], ZERO
    else prev, curr = ZERO, ZERO end
  else
    prev, curr = ZERO, ZERO
  end
  local prevPart = mul(prev, sub(W, e))
  local limit = mul(N, W)
  local allowed, retry = false, ZERO
  if cmp(add(prevPart, mul(add(curr, cost), W)), limit) <= 0 then
    curr = add(curr, cost)
    allowed = true
  else
    local cc = add(curr, cost)
    if cmp(cc, N) <= 0 then
      local e2 = sub(W, (divmod(mul(sub(N, cc), W), prev)))
      retry = sub(e2, e)
    else
      local e2 = sub(W, (divmod(mul(sub(N, cost), W), curr)))
      retry = add(sub(W, e), e2)
    end
  end
  local rem = ZERO
  local used = add(prevPart, mul(curr, W))
  if cmp(used, limit) <= 0 then rem = (divmod(sub(limit, used), W)) end
  local reset = ZERO
  if #curr > 0 then reset = sub(add(W, W), e) elseif #prev > 0 then reset = sub(W, e) end
  return {idx, prev, curr}, allowed, rem, retry, reset
end

-- wfixed is window.Limit.Fixed. st = {idx, count} or nil.
local function wfixed(N, W, st, now, cost)
  local idx, e = wsplit(now, W)
  local count = ZERO
  if st then
    local c = cmp(idx, st[1])
    if c < 0 then idx, e, count = st[1], ZERO, st[2]
    elseif c == 0 then count = st[2] end
  end
  local allowed, retry = false, ZERO
  if cmp(add(count, cost), N) <= 0 then
    count = add(count, cost)
    allowed = true
  else
    retry = sub(W, e)
  end
  local reset = ZERO
  if #count > 0 then reset = sub(W, e) end
  local rem = ZERO
  if cmp(count, N) < 0 then rem = sub(N, count) end
  return {idx, count}, allowed, rem, retry, reset
end

-- state strings: a kind letter, then 16 hex digits per field.
local function load(key, kind, nf)
  local s = unblock(key, getv(key))
  if s and kind == 'b' and #s == 41 and string.sub(s, 1, 1) == 'B' then
    -- written by the double path: packed doubles, exact integers
    local tat, oh, ol, ph = struct.unpack('<dddd', s, 2)
    return {num(tat), add(mul(num(oh), {0, 256}), num(ol)), num(ph)}
  end
  if not s or string.sub(s, 1, 1) ~= kind or #s ~= 1 + 16 * nf then return nil end
  local st = {}
  for i = 1, nf do st[i] = hex(s, 2 + 16 * (i - 1)) end
  return st
end

local function save(key, kind, st, ttl, expire)
  local pre, left = blockof(key)
  local parts = {pre, MRK and MRK[key] or '', kind}
  for i = 1, #st do parts[i + 3] = tohex(st[i]) end
  local v = table.concat(parts)
  if expire and (#ttl > 0 or left > 0) then
    -- expire when the state equals a new key's (whole ms, rounded up),
    -- and not before a block in force ends
    local q, r = divsmall(ttl, 1000000)
    local ms = tonum(q)
    if r > 0 then ms = ms + 1 end
    ms = math.max(ms, math.ceil(left / 1000000))
    if ms > 4503599627370496 then ms = 4503599627370496 end
    redis.call('SET', key, v, 'PX', string.format('%d', ms))
  else
    redis.call('SET', key, v)
  end
end

-- drop deletes key's state (it is a new key's again), keeping a block in
-- force, alone.
local function drop(key, expire)
  local pre, left = blockof(key)
  if pre == '' then
    redis.call('DEL', key)
  elseif expire then
    redis.call('SET', key, pre, 'PX', string.format('%d', math.ceil(left / 1000000)))
  else
    redis.call('SET', key, pre)
  end
end

local function now_ns(arg)
  if arg ~= '' then return hex(arg) end
  local t = redis.call('TIME')
  return add(mul(num(tonumber(t[1])), num(1000000000)), num(tonumber(t[2]) * 1000))
end

-- params reads a token bucket's parameters from the call's arguments at i.
local function bparams(i)
  return {U = hex(A[i]), C = hex(A[i + 1]), num = hex(A[i + 2]), den = hex(A[i + 3]), M = hex(A[i + 4])}
end

-- limb_respec converts key's state, written under the spec of marker
-- from (respec's), to the spec at A[at] (kind letter kind) by the SetLimit
-- rule, store.Spec.Convert, at the call's clock, and writes it at once
-- (with the key's marker, MRK[key], and any block in force): a token
-- bucket keeps the tokens it holds now (bucket.Params.Convert: no credit
-- created, tokens above a smaller capacity dropped, fractions below the
-- new unit rounded down, debt kept) and refills at the new rate from now;
-- a window or quota whose marker differs (another length or period)
-- starts anew, as a new key; so does a bucket full now (a full bucket is
-- a new key's: the store drops and expires full states).
local function limb_respec(kind, at, from, key, expire)
  local now = hex(NOWHEX)
  if kind ~= 'b' then
    unblock(key, getv(key))
    drop(key, expire)
    return
  end
  local st = load(key, 'b', 3)
  if not st then return end
  local P = {U = hex(from, 3), C = hex(from, 19), num = hex(from, 35), den = hex(from, 51), M = hex(from, 67)}
  local Q = bparams(at)
  local tat, origin, phase = bstate(P, st, now)
  local eneg, e = elapsed(now, origin)
  local v = units(P, eneg, e, phase)
  if cmp(tat, v) <= 0 then
    drop(key, expire)
    return
  end
  -- t, the tokens held (units of P, signed: debt below 0), is
  -- P.Tokens: C - (tat - V), C when full.
  local tneg, t = false, P.C
  if cmp(tat, v) > 0 then
    local d = sub(tat, v)
    if cmp(d, P.C) <= 0 then t = sub(P.C, d) else tneg, t = true, sub(d, P.C) end
  end
  local nt = ZERO
  if tneg or cmp((divmod(t, P.U)), (divmod(Q.C, Q.U))) < 0 then
    -- u = t * Q.U / P.U, rounded down (toward more debt when t < 0)
    local u, r = divmod(mul(t, Q.U), P.U)
    if tneg and #r > 0 then u = add(u, ONE) end
    if cmp(u, MAXAHEAD) > 0 then u = MAXAHEAD end
    if tneg then
      nt = add(Q.C, u)
    elseif cmp(u, Q.C) < 0 then
      nt = sub(Q.C, u)
    end
    if cmp(nt, MAXAHEAD) > 0 then nt = MAXAHEAD end
  end
  local _, _, _, _, reset = bstep(Q, nt, false, ZERO, ZERO, ZERO)
  if #reset == 0 then drop(key, expire) else save(key, 'b', {nt, now, ZERO}, reset, expire) end
end
