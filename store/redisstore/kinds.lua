-- sluice: kinds decided on limbs only, each one entry of KIND (by kind
-- letter) with three functions: check (may refuse the whole call before
-- anything is decided), take and adjust; take.lua and adjust.lua call them
-- for any letter they do not decide themselves. A kind added here needs no
-- change there.
local KIND = {}

-- q: a calendar quota (store.Quota, package quota). Parameters: [at]
-- limit, then four period starts b0 < b1 < b2 < b3 (16 hex digits each:
-- non-negative, so they compare as strings) computed by the caller around
-- its own clock; the store's clock falls in one of the three periods
-- (take.lua refuses the call before deciding anything otherwise). State:
-- {period start, used}.

-- qbounds returns the period [start, end) holding nowhex, or nil.
local function qbounds(at, nowhex)
  for j = 1, 3 do
    local s, e = A[at + j], A[at + j + 1]
    if s <= nowhex and nowhex < e then return s, e end
  end
end

-- qstate is quota.Limit's state at now: the period's bounds and the cost
-- used in it (a state of an earlier period counts nothing; a state of the
-- next period, read with a clock behind it, is decided at its start).
local function qstate(at, key, nowhex)
  local sh, eh = qbounds(at, nowhex)
  local now, start = hex(nowhex), hex(sh)
  local st = load(key, 'q', 2)
  local used = ZERO
  if st then
    local c = cmp(st[1], start)
    if c == 0 then
      used = st[2]
    elseif c > 0 then
      for j = 1, 3 do
        local bj = A[at + j]
        if bj > sh and cmp(st[1], hex(bj)) == 0 then
          sh, eh, now, start, used = bj, A[at + j + 1], hex(bj), st[1], st[2]
          break
        end
      end
    end
  end
  return start, hex(eh), now, used, st
end

KIND.q = {
  -- take is quota.Limit.Step.
  take = function(at, key, costn, cs, nowhex, expire)
    local N, cost = rsv(hex(A[at])), costl(costn, cs)
    local start, e, now, used = qstate(at, key, nowhex)
    local ok, retry = false, ZERO
    local never = RSV and cmp(cost, N) > 0 -- more than the class may ever count (store.Spec.StepReserved)
    if never then
    elseif cmp(add(used, cost), N) <= 0 then
      used, ok = add(used, cost), true
    else
      retry = sub(e, now)
    end
    local rem = ZERO
    if cmp(used, N) < 0 then rem = sub(N, used) end
    local reset = ZERO
    if #used > 0 then reset = sub(e, now) end
    if never then retry = reset end
    return ok, outv(rem), outv(retry), outv(reset), function() save(key, 'q', {start, used}, reset, expire) end
  end,
  -- adjust is quota.Limit.Adjust (sign '-' returns delta, '+' charges).
  adjust = function(at, key, sign, delta, nowhex, expire)
    -- The store's clock is a period away from the caller's: the settle is
    -- dropped (take refuses such calls; a settle has no answer to refuse).
    if not qbounds(at, nowhex) then return end
    local start, e, now, used, st = qstate(at, key, nowhex)
    if sign == '-' then
      if not st or cmp(st[1], start) ~= 0 then return end -- nothing left to return to
      if cmp(used, delta) <= 0 then used = ZERO else used = sub(used, delta) end
    else
      used = add(used, delta)
      if cmp(used, MAXINT) > 0 then used = MAXINT end -- saturating, as quota.Limit.Adjust
    end
    local reset = ZERO
    if #used > 0 then reset = sub(e, now) end
    if #reset == 0 then drop(key, expire) else save(key, 'q', {start, used}, reset, expire) end
  end,
  -- check is whether the store's clock lies in the caller's periods.
  check = function(at, nowhex) return qbounds(at, nowhex) ~= nil end,
}
