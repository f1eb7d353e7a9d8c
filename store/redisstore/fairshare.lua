-- sluice: fair shares between tenants (store.FairShare, store.Spec.DecideShare)
-- on exact limbs, defined with the limb model (only calls with a fair-share
-- item need them).
--
-- A fair-share bucket of key K has a tenant set in two keys of K's hash
-- slot (the caller names them, store/redisstore/fairshare.go): a HASH H
-- whose field 's' is the sum of the set's weights (16 hex digits) and whose
-- field 'h'..holder is the holder's last_seen (16 hex digits of ns), vtat
-- (16 hex digits of ns) and weight (8 hex digits) (and, pending a
-- cluster's undo, its vtat before and an undo id: fs_admit), and a ZSET Z of the
-- holders scored by last_seen in whole microseconds (exact in a double;
-- the exact ns in H decide, the score only finds the candidates).

-- fs_expire removes from the set (H, Z) every holder with last_seen <=
-- now - aw (store.FairShare.Expired) and returns the sum of the weights
-- left (limbs). Amortised: each holder is removed once.
local function fs_expire(H, Z, now, aw)
  local raw = redis.call('HGET', H, 's')
  local sum = ZERO
  if raw then sum = hex(raw) end
  if cmp(now, aw) < 0 then return sum end
  local cut = sub(now, aw)
  local cq = divsmall(cut, 1000)
  local cand = redis.call('ZRANGEBYSCORE', Z, '-inf', string.format('%d', tonum(cq)))
  local j0 = 1
  while j0 <= #cand do
    -- (in chunks: unpack is bounded by Lua's C stack)
    local j1 = math.min(#cand, j0 + 999)
    local f = {}
    for j = j0, j1 do f[#f + 1] = 'h' .. cand[j] end
    local vals = redis.call('HMGET', H, unpack(f))
    local dh, dz = {}, {}
    for j = 1, #f do
      local v = vals[j]
      if not v or cmp(hex(v, 1), cut) <= 0 then
        dz[#dz + 1] = cand[j0 + j - 1]
        if v then
          dh[#dh + 1] = f[j]
          sum = sub(sum, num(tonumber(string.sub(v, 33, 40), 16)))
        end
      end
    end
    if #dh > 0 then redis.call('HDEL', H, unpack(dh)) end
    if #dz > 0 then redis.call('ZREM', Z, unpack(dz)) end
    j0 = j1 + 1
  end
  return sum
end

-- fs_rec is a holder's field value: last_seen, vtat, weight.
local function fs_rec(ls, vt, w)
  return tohex(ls) .. tohex(vt) .. string.format('%08x', w)
end

-- fs_touch is a fair-share item's expiry and touch (written whether the
-- request is then admitted or not): holder h (the item's Tenant) asking
-- with weight w, at most maxn holders besides OtherHolder ''. A new holder
-- in a full set counts as '' with weight 1 (store.FairShare.Holder,
-- store.HolderWeight). Returns a table {H, Z, field, w, vtat, sum} for
-- fs_decide (w the weight counted, vtat the holder's limbs, sum the set's
-- weights with it).
local function fs_touch(H, Z, h, w, awhex, maxn, nowhex)
  local now = limbnow(nowhex)
  local sum = fs_expire(H, Z, now, hex(awhex))
  local f = 'h' .. h
  local rec = redis.call('HGET', H, f)
  local ww = math.max(w, 1)
  if not rec and h ~= '' and redis.call('ZCARD', Z) >= maxn then
    h, f, ww = '', 'h', 1
    rec = redis.call('HGET', H, f)
  end
  local vt, undo = ZERO, ''
  if rec then
    vt, undo = hex(rec, 17), string.sub(rec, 41)
    sum = sub(sum, num(tonumber(string.sub(rec, 33, 40), 16)))
  end
  sum = add(sum, num(ww))
  redis.call('HSET', H, f, fs_rec(now, vt, ww) .. undo, 's', tohex(sum))
  redis.call('ZADD', Z, string.format('%d', tonum((divsmall(now, 1000)))), h)
  return {H = H, Z = Z, f = f, w = ww, vt = vt, sum = sum}
end

-- fs_ttl keeps the set as long as its bucket's state (reset, ns: a reply
-- value) or the active window, whichever is longer (store.FairShare.SetTTL).
local function fs_ttl(T, awhex, reset)
  local r = reset
  if type(r) == 'string' then r = hex(r) else r = num(r) end
  local aw = hex(awhex)
  if cmp(r, aw) < 0 then r = aw end
  local q, rm = divsmall(r, 1000000)
  local ms = tonum(q)
  if rm > 0 then ms = ms + 1 end
  if ms > 4503599627370496 then ms = 4503599627370496 end
  local px = string.format('%d', ms + 1)
  redis.call('PEXPIRE', T.H, px)
  redis.call('PEXPIRE', T.Z, px)
end

-- limbv is a reply value (a number, or hex digits) as limbs.
local function limbv(x)
  if type(x) == 'string' then return hex(x) end
  return num(x)
end

-- fs_decide is the share's part of store.Spec.DecideShare for an item the
-- bucket alone admitted (cost > 0, its state in key, the spec's parameters
-- at A[at], the request's class reserve RSV and MaxWait mwhex ('' for
-- none); T from fs_touch). Returns nil when the bucket is not contended
-- (it holds at least half its whole tokens in the class's view,
-- store.Spec.Contended: the bucket decides alone);
-- else true, the new vtat (limbs) and the wait (a reply value, the larger
-- of the bucket's, wait0, and the share's) when the share admits; else
-- false and the retry (reply value).
local function fs_decide(at, key, costn, cs, nowhex, mwhex, wait0, T)
  local now = limbnow(nowhex)
  local P = rsvp(bparams(at))
  local tat, origin, phase = bstate(P, load(key, 'b', 3), now)
  local eneg, e = elapsed(now, origin)
  local v = (units(P, eneg, e, phase))
  -- contended iff C - (tat - V) < h, h = floor(floor(C/U)/2)·U (half the
  -- whole tokens of the class's view), i.e. tat - V > C - h
  local h = mul(divsmall((divmod(P.C, P.U)), 2), P.U)
  if cmp(tat, v) <= 0 or cmp(sub(tat, v), sub(P.C, h)) <= 0 then return nil end
  -- allowance = max(tau/2, inc), tau = floor(C*den/num); inc =
  -- ceil(cost*U*den*sum / (num*w)); both at most 2^62 (store.MaxShareInc)
  local ht = divsmall((divmod(mul(P.C, P.den), P.num)), 2)
  if cmp(ht, MAXSTATE) > 0 then ht = MAXSTATE end
  local q, r = divmod(mul(mul(mul(costl(costn, cs), P.U), P.den), T.sum), mul(P.num, num(T.w)))
  if #r > 0 then q = add(q, ONE) end
  if cmp(q, MAXSTATE) > 0 then q = MAXSTATE end
  local allowance = ht
  if cmp(q, ht) > 0 then allowance = q end
  local base = T.vt
  if cmp(now, base) > 0 then base = now end
  local nvt = add(base, q)
  if cmp(nvt, MAXINT) > 0 then nvt = MAXINT end
  local ahead = sub(nvt, now)
  local limit = allowance
  if mwhex ~= '' then
    limit = add(limit, hex(mwhex))
    if cmp(limit, MAXINT) > 0 then limit = MAXINT end
  end
  if cmp(ahead, limit) > 0 then return false, outv(sub(ahead, allowance)) end
  local w = wait0
  if cmp(ahead, allowance) > 0 then
    local sw = sub(ahead, allowance)
    if cmp(sw, limbv(wait0)) > 0 then w = outv(sw) end
  end
  return true, nvt, w
end

-- fs_admit writes the holder's new vtat (the request was admitted). With
-- an undo id (a request over several hash slots of a cluster, whose other
-- slots may still refuse it), the record keeps the vtat before and the id
-- after its 40 characters, for undoShareScript (fairshare.go); any later
-- write of another vtat drops them, and a touch keeps them.
local function fs_admit(T, nvt, nowhex, undo)
  local rec = fs_rec(limbnow(nowhex), nvt, T.w)
  if undo ~= '' then rec = rec .. tohex(T.vt) .. undo end
  redis.call('HSET', T.H, T.f, rec)
end
