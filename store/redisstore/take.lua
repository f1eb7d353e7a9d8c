-- sluice take: decides a batch of requests, each all-or-nothing over its
-- items, in one atomic script.
-- ARGV: [1] now (16 hex digits, ns) or '' for Redis TIME; [2] '1' to let
-- keys expire when their state is new again; [3] S, the number of specs,
-- then 10 fields per spec: kind (b bucket, s sliding window, f fixed
-- window, c concurrency, or a kind of kinds.lua; a double-path bucket's letter is followed by an
-- id naming its parameters), 7 parameters, its block_for (16 hex
-- digits of ns, or '' for none: the penalty box, see decide), and the
-- marker of its keys' usual spec when it is an override of that spec
-- ('' when it is their usual spec: see respec); then R, the number of
-- requests, and per request its slot id, item count m, MaxWait (16
-- hex digits of ns, or '' for none: a request with one books its token
-- buckets, on the limb path) and its priority class's reserve (parts per
-- million, or '' for none: its items decide within their limits cut by
-- it, on the limb path), then 2 fields per item: spec index and cost
-- (decimal, or 'x' and 16 hex digits); an item decided with its fair
-- share has 'f' after its spec index and 6 more fields after its cost
-- (its tenant set's hash's index into KEYS, holder, weight, active window,
-- max_tenants, undo id: fairshare.lua).
-- KEYS are the items' keys, request after request, then the tenant sets'
-- keys (a hash and a sorted set per fair-share item).
-- Returns {items decided on doubles, now (hex), then per request: 1 and
-- per item remaining and reset when admitted (2 and per item remaining,
-- reset and wait when admitted with a MaxWait), else 0 and per item allowed,
-- remaining, retry and reset (integers, or hex strings when 2^53 or
-- more), and last, when a request was admitted with a MaxWait on Redis
-- TIME, the ns the script took (its waits count from now, its answer
-- leaves that much later)}. With OOM (the allow-oom entry point, called
-- when Redis is at maxmemory), a request that would create a key answers
-- 3 alone.
local nh, nl = now2(ARGV[1])
local nowhex = hex2(nh, nl)
local nowms -- Unix ms, made when a write needs it
local expire = ARGV[2] == '1'
BLK, NOWHEX, MRK, G1k = nil, nowhex, nil, nil

local specs = {}
local a = 4
for i = 1, tonumber(ARGV[3]) do
  local tag = ARGV[a] -- the kind letter, then (double path) the spec's id
  local kind = string.sub(tag, 1, 1)
  local sp = {kind = kind, at = a + 1}
  if ARGV[a + 8] ~= '' then sp.blk = ARGV[a + 8] end
  if ARGV[a + 9] ~= '' then sp.bmk = ARGV[a + 9] end
  if kind == 'b' and ARGV[a + 6] ~= '' then
    -- The double path's numbers, parsed once per spec (FCACHE lives as
    -- long as the function library; a script call starts it empty).
    local F = FCACHE[tag]
    if not F then
      local ch, cl = split16(ARGV[a + 2], 1)
      local uh, ul = split16(ARGV[a + 3], 1)
      local dh, dl = split16(ARGV[a + 4], 1)
      local mh, ml = split16(ARGV[a + 5], 1)
      local kh, kl = split16(ARGV[a + 1], 1)
      F = {k2 = kh * T32 + kl, qn = tonumber(ARGV[a + 6]), rn = tonumber(ARGV[a + 7]),
        C = ch * T32 + cl, num = uh * T32 + ul, den = dh * T32 + dl, M = mh * T32 + ml}
      if FN >= 4096 then FCACHE, FN = {}, 0 end
      FCACHE[tag], FN = F, FN + 1
    end
    sp.F = F
  elseif kind ~= 'b' and kind ~= 's' and kind ~= 'f' and kind ~= 'c' then
    -- a kind of kinds.lua, which may refuse the call before anything is
    -- decided (a quota whose periods do not hold the store's clock)
    local K = limbs().kinds[kind]
    if not K then return redis.error_reply('ERR sluice: unknown kind ' .. kind) end
    if not K.check(a + 1, nowhex) then
      return redis.error_reply('ERR sluice: the store clock (' .. nowhex .. ') is outside the periods given for kind ' .. kind)
    end
  end
  specs[i] = sp
  a = a + 10
end

local out = {0, nowhex}
local no = 2 -- values in out
local oks, rems, retries, resets = {}, {}, {}, {} -- a request's items' decisions
local pend = {} -- a request's items' writes (reused: every request sets its own)
local items, costs = {}, {} -- a request's items' specs and costs (likewise)
local slot_id -- the request's slot id
local mw -- the request's MaxWait (hex) or ''
local waits = {} -- a request's items' waits (booked)
local booked = false -- a request was admitted with a MaxWait
local wt, wh, wl, wp, wr, we = {}, {}, {}, {}, {}, {} -- double-path writes, by KEYS index
local fastn = 0
local k = 0
local nreq = tonumber(ARGV[a])
a = a + 1
-- decide0 decides one item (KEYS index k, its place i in the request):
-- allowed, remaining, retry, reset, and what to write if the request is
-- admitted (i for a double-path bucket, whose write is in the batch's
-- arrays; else a function; nil for nothing). With T (an item of a fair
-- share, fs_touch's tenant set), an admission is then the share's to keep
-- (the holder's new vtat pending in fsw, the larger wait) or refuse:
-- nothing taken, the bucket's peek, the share's retry, and true last (a
-- share's refusal starts no penalty box): store.Spec.DecideShare.
local fsw -- the current request's fair-share items' vtat writes, by item (nil: none)
local function decide0(sp, key, costn, cs, k, i, T)
  local kind = sp.kind
  local ok, rem, retry, reset, save1
  waits[i] = 0
  if kind == 'b' and mw ~= '' and costn ~= 0 then
    ok, rem, retry, reset, save1, waits[i] = limbs().book(sp.at, key, costn, cs, nowhex, expire, mw)
  elseif kind == 'b' then
    local fast = false
    local F = sp.F
    if F and costn and not RSV then -- (a class's reserve: the limb path)
      local has, tat, oh, ol, ph, oldexp = fload(unblock(key, getv(key)))
      if has ~= false then
        local t2, h2, l2, p2
        ok, rem, retry, reset, t2, h2, l2, p2 = fbucket(F, has, tat, oh, ol, ph, nh, nl, costn)
        if ok ~= nil then
          fast = true
          fastn = fastn + 1
          save1 = i -- the double path's write, kept in the batch's arrays
          wt[k], wh[k], wl[k], wp[k], wr[k], we[k] = t2, h2, l2, p2, reset, oldexp or false
        end
      end
    end
    if not fast then
      ok, rem, retry, reset, save1 = limbs().bucket(sp.at, key, costn, cs, nowhex, expire)
    end
  elseif kind == 's' or kind == 'f' then
    ok, rem, retry, reset, save1 = limbs().window(kind, sp.at, key, costn, cs, nowhex, expire)
  elseif kind ~= 'c' then
    ok, rem, retry, reset, save1 = limbs().kinds[kind].take(sp.at, key, costn, cs, nowhex, expire)
  else
    -- concurrency: a sorted set of slot ids scored by expiry (Unix us)
    local max, ttl = tonumber(ARGV[sp.at]), tonumber(ARGV[sp.at + 1])
    if RSV then max = limbs().rsvn(max) end -- a class's reserve of slots
    local x = nh * 296 + nl -- ns = nh*2^32 + nl = nh*(4294967*1000 + 296) + nl
    local q = floor(x / 1000)
    local r = x - q * 1000
    local us = nh * 4294967 + q
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', us))
    local live = redis.call('ZCARD', key)
    local take = 0
    if costn ~= 0 then take = 1 end
    local last = 0
    if live > 0 then last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
    retry, reset = 0, 0
    if live + take <= max then
      ok, rem = true, max - live - take
      if take > 0 then last = math.max(last, us + ttl) end -- (a renewed slot may expire later)
    else
      ok, rem = false, 0
      local first = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
      retry = (first - us) * 1000 - r
    end
    if last > us then reset = (last - us) * 1000 - r end
    if take > 0 then
      save1 = function()
        redis.call('ZADD', key, string.format('%d', us + ttl), slot_id)
        -- the set lives as long as its last slot (never shortened)
        if expire then redis.call('PEXPIRE', key, string.format('%d', math.ceil((last - us) / 1000) + 1)) end
      end
    end
  end
  if costn == 0 then save1 = nil end -- a peek writes nothing
  if T and ok then
    local s, x, w = limbs().fsdecide(sp.at, key, costn, cs, nowhex, mw, waits[i], T)
    if s == false then
      local _
      _, rem, _, reset = decide0(sp, key, 0, '0', k, i)
      return false, rem, x, reset, nil, true
    end
    if s then
      fsw = fsw or {}
      fsw[i] = {T, x}
      waits[i] = w
    end
  end
  return ok, rem, retry, reset, save1
end

-- vmax is the larger of a reply value a (a number, or hex digits when
-- 2^53 or more) and a number b below 2^53.
local function vmax(a, b)
  if type(a) == 'string' or a >= b then return a end
  return b
end

-- decide is decide0 under the spec's penalty box (store.Spec.Penalize)
-- when it has one (sp.blk, its block_for): while the key's block is in
-- force every decision is refused, takes nothing and reports 0 remaining
-- and the later of the block's end and its own retry and reset; with none
-- in force, a refusal of a cost above 0 starts one, ending block_for from
-- now, written at once with the key's state unchanged (the request is
-- refused: nothing else of it is written).
local function decide(sp, key, costn, cs, k, i, T)
  if sp.kind ~= 'c' then
    -- the key's state as this spec reads it (converted when it was
    -- written under another spec of its limit)
    local from = respec(sp.kind, sp.at, sp.bmk, key)
    if from then
      limbs().respec(sp.kind, sp.at, from, key, expire)
      G1k = nil
    end
  end
  local blk = sp.blk
  if not blk then
    local ok, rem, retry, reset, save1 = decide0(sp, key, costn, cs, k, i, T)
    G1k = nil
    return ok, rem, retry, reset, save1
  end
  local raw = getv(key)
  G1k, G1v = key, raw -- (decide0 reads it again)
  local u
  if raw and string.byte(raw, 1) == 33 then
    if string.sub(raw, 2, 17) > nowhex then u = string.sub(raw, 2, 17) end
    raw = string.sub(raw, 18)
  end
  local ok, rem, retry, reset, save1, sref = decide0(sp, key, costn, cs, k, i, T) -- (sref: refused by its share)
  G1k = nil
  local left
  if u then
    local uh, ul = split16(u, 1)
    left = (uh - nh) * T32 + (ul - nl)
  elseif ok or costn == 0 or RSV or sref then -- (a class's or a share's refusal starts no block)
    return ok, rem, retry, reset, save1
  else
    local bh, bl = split16(blk, 1)
    local lo = nl + bl
    local c = floor(lo / T32)
    u, left = hex2(nh + bh + c, lo - c * T32), bh * T32 + bl
    local v = '!' .. u .. (raw or '')
    local ms = math.ceil(left / 1000000)
    local pttl = -1
    if expire then pttl = redis.call('PTTL', key) end
    if pttl == -1 or pttl >= ms then
      redis.call('SET', key, v, 'KEEPTTL')
    else
      redis.call('SET', key, v, 'PX', string.format('%d', ms))
    end
    BLK = BLK or {}
    BLK[key] = {u, left}
  end
  return false, 0, vmax(retry, left), vmax(reset, left), nil
end

for req = 1, nreq do
  slot_id, mw, RSV = ARGV[a], ARGV[a + 2], tonumber(ARGV[a + 3])
  local m = tonumber(ARGV[a + 1])
  a = a + 4
  local k0 = k -- KEYS index before this request's first item
  local new = false
  if OOM then
    -- At maxmemory (noeviction): a request that would create a key (an
    -- item with a cost whose key does not exist) is refused undecided,
    -- 3 and nothing else; the others are decided as usual.
    local b = a
    for i = 1, m do
      local f = tonumber(ARGV[b]) -- (nil: a fair-share item, whose set is a key too)
      if ARGV[b + 1] ~= '0' and (redis.call('EXISTS', KEYS[k0 + i]) == 0 or (not f and redis.call('EXISTS', KEYS[tonumber(ARGV[b + 2])]) == 0)) then new = true break end
      if f then b = b + 2 else b = b + 8 end
    end
  end
  if new then
    k = k + m
    for _ = 1, m do
      if tonumber(ARGV[a]) then a = a + 2 else a = a + 8 end
    end
    out[no + 1] = 3
    no = no + 1
  else
    local all = true
    fsw = nil
    for i = 1, m do
      k = k + 1
      local si, cs = ARGV[a], ARGV[a + 1]
      local spi = tonumber(si)
      local ok, rem, retry, reset, save1
      if spi then
        local sp = specs[spi]
        items[i], costs[i] = sp, cs
        a = a + 2
        ok, rem, retry, reset, save1 = decide(sp, KEYS[k], tonumber(cs), cs, k, i)
      else
        -- a fair-share item: its spec index then 'f', and after its cost
        -- 6 more fields at fsa (shareFields in fairshare.go)
        local sp, fsa = specs[tonumber(string.sub(si, 1, -2))], a + 2
        items[i], costs[i] = sp, cs
        a = a + 8
        local costn = tonumber(cs)
        local T
        if costn ~= 0 then
          local hk = tonumber(ARGV[fsa])
          T = limbs().fstouch(KEYS[hk], KEYS[hk + 1], ARGV[fsa + 1], tonumber(ARGV[fsa + 2]), ARGV[fsa + 3], tonumber(ARGV[fsa + 4]), nowhex)
          T.undo = ARGV[fsa + 5]
        end
        ok, rem, retry, reset, save1 = decide(sp, KEYS[k], costn, cs, k, i, T)
        if T and expire then limbs().fsttl(T, ARGV[fsa + 3], reset) end
      end
      if not ok then all = false end
      pend[i] = save1
      oks[i], rems[i], retries[i], resets[i] = ok, rem, retry, reset
    end
    if not all then
      -- Refused: nothing is taken, so the items that alone would admit
      -- report their state as it is (a peek).
      for i = 1, m do
        if oks[i] and tonumber(costs[i]) ~= 0 then
          local _
          _, rems[i], retries[i], resets[i] = decide(items[i], KEYS[k0 + i], 0, '0', k0 + i, i)
          retries[i] = 0 -- it alone would admit (or book): no wait
        end
      end
    end
    if all then
      for i = 1, m do
        local p = pend[i]
        if p == i then -- a double-path bucket
          if not nowms then
            -- ns = nh*2^32 + nl, and 2^32 = 4294*10^6 + 967296
            nowms = nh * 4294 + floor((nh * 967296 + nl) / 1000000)
          end
          local j = k0 + i
          fstore(KEYS[j], wt[j], wh[j], wl[j], wp[j], wr[j], nowms, we[j] or nil, expire)
        elseif p then
          p()
        end
        if fsw and fsw[i] then limbs().fsadmit(fsw[i][1], fsw[i][2], nowhex, fsw[i][1].undo) end
      end
      -- admitted: every item admitted, so remaining and reset per item
      -- (and its wait, for a request with a MaxWait)
      if mw ~= '' then
        booked = true
        out[no + 1] = 2
        no = no + 1
        for i = 1, m do
          out[no + 1], out[no + 2], out[no + 3] = rems[i], resets[i], waits[i]
          no = no + 3
        end
      else
        out[no + 1] = 1
        no = no + 1
        for i = 1, m do
          out[no + 1], out[no + 2] = rems[i], resets[i]
          no = no + 2
        end
      end
    else
      out[no + 1] = 0
      no = no + 1
      for i = 1, m do
        out[no + 1], out[no + 2], out[no + 3], out[no + 4] = oks[i] and 1 or 0, rems[i], retries[i], resets[i]
        no = no + 4
      end
    end
  end
end
out[1] = fastn
if booked and ARGV[1] == '' then
  local eh, el = now2('')
  out[no + 1] = (eh - nh) * T32 + (el - nl)
end
return out
