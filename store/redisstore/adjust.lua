-- sluice adjust: corrections to items taken earlier (reserve, then
-- settle). ARGV: [1] now (hex) or '', [2] expire flag, then 7 fields per
-- key: kind, sign ('-' returns, '+' charges, 'p' pauses a token bucket
-- for delta ns, 'l' lowers one to at most delta tokens), delta (hex), refund-before
-- (hex), the kind's 7 parameter fields (as take's), and the marker of the
-- key's usual spec when the spec is an override of it ('' when it is its
-- usual spec: see respec). A key whose sign is 'r' is an in-flight set
-- whose slot (the id in the delta field; the other fields empty) is
-- released (ZREM), so that a settle and its call's release are one call.
-- A ceiling ('l') that lowers nothing writes nothing. Returns 1, or 0 when
-- OOM refused it.
local now = now_ns(ARGV[1])
local expire = ARGV[2] == '1'
BLK, NOWHEX, MRK, G1k = nil, tohex(now), nil, nil
if OOM then
  -- At maxmemory (noeviction), called through the allow-oom entry point:
  -- an adjustment that would create a key (all but a return, which never
  -- does) refuses the call, 0, before anything is written.
  for i = 1, #KEYS do
    local sign = ARGV[3 + (i - 1) * 12 + 1]
    if sign ~= '-' and sign ~= 'r' and redis.call('EXISTS', KEYS[i]) == 0 then return 0 end
  end
end
for i = 1, #KEYS do
  local a = 3 + (i - 1) * 12
  if ARGV[a + 1] == 'r' then
    redis.call('ZREM', KEYS[i], ARGV[a + 2]) -- a slot released (Release's own command)
  else
  local kind, sign, delta, before, key = ARGV[a], ARGV[a + 1], hex(ARGV[a + 2]), hex(ARGV[a + 3]), KEYS[i]
  local late = sign == '-' and cmp(now, before) >= 0
  if not late and (kind == 'b' or kind == 's' or kind == 'f' or KIND[kind]) then
    -- the key's state as this spec reads it (converted when it was
    -- written under another spec of its limit)
    local bmk = ARGV[a + 11]
    if bmk == '' then bmk = nil end
    local from = respec(kind, a + 4, bmk, key)
    if from then
      limb_respec(kind, a + 4, from, key, expire)
      G1k = nil
    end
  end
  if late then
    -- refilled, or a new window: returning it would create credit
  elseif kind == 'b' then
    local P = bparams(a + 4)
    local st = load(key, 'b', 3)
    if st or sign ~= '-' then -- a charge (or a pause) counts against a new state too
      local tat, origin, phase = bstate(P, st, now)
      local lowered = false
      local eneg, e = elapsed(now, origin)
      if sign == 'p' then
        -- bucket.Params.Pause: empty exactly delta from now, unless the
        -- state is in debt for longer.
        local pe
        if eneg then
          if cmp(delta, e) > 0 then pe = sub(delta, e) else pe = ZERO end
        else
          pe = add(e, delta)
        end
        local target = add((units(P, false, pe, phase)), P.C)
        if cmp(target, tat) > 0 then tat = target end
      elseif sign == 'l' then
        -- bucket.Params.Lower: at most delta tokens now, never raised.
        local top = add((units(P, eneg, e, phase)), P.C)
        local want = mul(delta, P.U)
        if cmp(want, P.C) < 0 and cmp(top, want) > 0 then
          local target = sub(top, want)
          if cmp(target, tat) > 0 then tat, lowered = target, true end
        end
      elseif sign == '-' then
        local back = mul(delta, P.U)
        if cmp(tat, back) <= 0 then tat = ZERO else tat = sub(tat, back) end
      else
        -- bucket.Params.Charge: the state is capped at min(2C, MaxAhead)
        -- ahead of V (one capacity of debt).
        local base = bbase(P, tat, eneg, e, phase)
        local ahead = add(P.C, P.C)
        if cmp(ahead, MAXAHEAD) > 0 then ahead = MAXAHEAD end
        local limit = add((units(P, eneg, e, phase)), ahead)
        if cmp(base, limit) >= 0 then
          tat = base
        else
          local room = (divmod(sub(limit, base), P.U))
          if cmp(delta, room) >= 0 then tat = limit else tat = add(base, mul(delta, P.U)) end
        end
      end
      if sign ~= 'l' or lowered then -- (a ceiling that lowers nothing leaves the state, and a new key, alone)
        local _, _, _, _, reset = bstep(P, tat, eneg, e, phase, ZERO)
        if #reset == 0 then drop(key, expire) else save(key, 'b', {tat, origin, phase}, reset, expire) end
      end
    end
  elseif kind == 's' or kind == 'f' then
    local N, W = hex(ARGV[a + 4]), hex(ARGV[a + 5])
    local nf = 3
    if kind == 'f' then nf = 2 end
    local st = load(key, kind, nf)
    if not st and sign == '+' then
      if kind == 's' then st = {ZERO, ZERO, ZERO} else st = {ZERO, ZERO} end
    end
    if st then
      local idx = wsplit(now, W)
      local skip = false
      if cmp(st[1], idx) ~= 0 then
        if sign == '-' then
          skip = true
        elseif kind == 's' then
          st = wslide(N, W, st, now, ZERO)
        else
          st = {idx, ZERO}
        end
      end
      if not skip then
        local ci = 3
        if kind == 'f' then ci = 2 end
        if sign == '-' then
          if cmp(st[ci], delta) <= 0 then st[ci] = ZERO else st[ci] = sub(st[ci], delta) end
        else
          -- at most one limit of debt beyond full (store's capCount)
          local cap = add(N, N)
          if cmp(st[ci], cap) <= 0 then
            st[ci] = add(st[ci], delta)
            if cmp(st[ci], cap) > 0 then st[ci] = cap end
          end
        end
        save(key, kind, st, add(W, W), expire)
      end
    end
  elseif KIND[kind] then
    KIND[kind].adjust(a + 4, key, sign, delta, tohex(now), expire)
  end
  end
  G1k = nil
end
return 1
