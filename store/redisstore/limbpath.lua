-- sluice: take's limb paths (token buckets whose numbers exceed doubles,
-- and windows), defined only when a batch needs them.

-- outv turns limbs into a reply value.
local function outv(x)
  if #x < 3 or x[3] < 32 then return tonum(x) end
  return tohex(x)
end

-- costl is an item's cost as limbs.
local function costl(costn, cs)
  if costn then return num(costn) end
  return hex(cs, 2)
end

-- rsv is x (limbs) less the current request's class reserve, rounded
-- down (store.Reserved): x itself when the request has none.
local function rsv(x)
  if not RSV then return x end
  return (divmod(mul(x, num(1000000 - RSV)), num(1000000)))
end

-- rsvp is a token bucket's parameters as the current request's class
-- sees them (bucket.Params.Reserved): the capacity cut by its reserve,
-- marked R (bstep then admits from a full bucket only a cost within it).
local function rsvp(P)
  if RSV then P.C, P.R = rsv(P.C), true end
  return P
end

local nowl, nowlhex

local function limbnow(nowhex)
  if nowlhex ~= nowhex then nowl, nowlhex = hex(nowhex), nowhex end
  return nowl
end

local function limb_bucket(at, key, costn, cs, nowhex, expire)
  local now = limbnow(nowhex)
  local P = rsvp(bparams(at))
  local cost = costl(costn, cs)
  local tat, origin, phase = bstate(P, load(key, 'b', 3), now)
  local eneg, e = elapsed(now, origin)
  local nt, ok, rem, retry, rr = bstep(P, tat, eneg, e, phase, cost)
  if ok and #cost > 0 and not eneg then
    -- Rebase to now (exact), as the double path does: the state's
    -- origin is its last write.
    local v, r = units(P, false, e, phase)
    nt, origin, phase = sub(nt, v), now, r
  end
  return ok, outv(rem), outv(retry), outv(rr), function() save(key, 'b', {nt, origin, phase}, rr, expire) end
end

local function limb_window(kind, at, key, costn, cs, nowhex, expire)
  local now = limbnow(nowhex)
  local N, W, cost = rsv(hex(A[at])), hex(A[at + 1]), costl(costn, cs)
  local st, ok, rem, retry, rr
  if RSV and cmp(cost, N) > 0 then
    -- more than the class may ever count in a window (store.Spec.StepReserved):
    -- refused, its state as it is, retry when the count is gone
    local _
    if kind == 's' then
      _, _, rem, _, rr = wslide(N, W, load(key, 's', 3), now, ZERO)
    else
      _, _, rem, _, rr = wfixed(N, W, load(key, 'f', 2), now, ZERO)
    end
    return false, outv(rem), outv(rr), outv(rr), nil
  end
  if kind == 's' then
    st, ok, rem, retry, rr = wslide(N, W, load(key, 's', 3), now, cost)
  else
    st, ok, rem, retry, rr = wfixed(N, W, load(key, 'f', 2), now, cost)
  end
  return ok, outv(rem), outv(retry), outv(rr), function() save(key, kind, st, rr, expire) end
end

-- limb_book is bucket.Params.Reserve (store.Spec.Book): cost booked at the
-- earliest time it is there, the state going into debt, when that wait is
-- within mwhex; else Step's refusal (nothing booked). Returns take's five
-- values and the wait.
local function limb_book(at, key, costn, cs, nowhex, expire, mwhex)
  local now = limbnow(nowhex)
  local P = rsvp(bparams(at))
  local cost = costl(costn, cs)
  local tat, origin, phase = bstate(P, load(key, 'b', 3), now)
  local eneg, e = elapsed(now, origin)
  local v = (units(P, eneg, e, phase))
  local nt = add(bbase(P, tat, eneg, e, phase), mul(cost, P.U))
  local w = ZERO
  local ok = cmp(sub(nt, v), MAXAHEAD) <= 0
  if ok and cmp(nt, P.C) > 0 then w = wait(P, sub(nt, P.C), eneg, e, phase) end
  if not ok or cmp(w, hex(mwhex)) > 0 then
    local a1, a2, a3, a4, a5 = limb_bucket(at, key, costn, cs, nowhex, expire)
    return a1, a2, a3, a4, a5, 0
  end
  local _, _, rem, _, rr = bstep(P, nt, eneg, e, phase, ZERO)
  if not eneg then
    -- rebase to now (exact), as limb_bucket does
    local vv, r = units(P, false, e, phase)
    nt, origin, phase = sub(nt, vv), now, r
  end
  return true, outv(rem), 0, outv(rr), function() save(key, 'b', {nt, origin, phase}, rr, expire) end, outv(w)
end
