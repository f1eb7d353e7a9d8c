-- sluice take: all-or-nothing admission of KEYS[i] (items), in one script
-- so that it is atomic. ARGV: [1] now (hex ns) or '' for Redis TIME,
-- [2] lease id, [3] '1' to let keys expire when their state is new again,
-- then 7 fields per item: kind (b bucket, s sliding, f fixed, c
-- concurrency), cost (hex), and the kind's parameters.
-- Returns {allowed, then per item: allowed, remaining, retry, reset,
-- refund-before (hex)}.
local now = now_ns(ARGV[1])
local lease, expire = ARGV[2], ARGV[3] == '1'
local n = #KEYS
local out = {1}
local pend = {}
local all = true
for i = 1, n do
  local a = 4 + (i - 1) * 7
  local kind, cost, key = ARGV[a], hex(ARGV[a + 1]), KEYS[i]
  local ok, rem, retry, reset, st, refund
  refund = ZERO
  if kind == 'b' then
    local P = bparams(a + 2)
    local tat, origin, phase = bstate(P, load(key, 'b', 3), now)
    local eneg, e = elapsed(now, origin)
    local nt
    nt, ok, rem, retry, reset = bstep(P, tat, eneg, e, phase, cost)
    st = {nt, origin, phase}
    refund = add(now, reset)
  elseif kind == 's' or kind == 'f' then
    local N, W = hex(ARGV[a + 2]), hex(ARGV[a + 3])
    if kind == 's' then
      st, ok, rem, retry, reset = wslide(N, W, load(key, 's', 3), now, cost)
    else
      st, ok, rem, retry, reset = wfixed(N, W, load(key, 'f', 2), now, cost)
    end
    local _, e = wsplit(now, W)
    refund = add(now, sub(W, e))
  else
    -- concurrency: a sorted set of lease ids scored by expiry (Unix us)
    local max, ttl = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
    local q, r = divsmall(now, 1000)
    local us = tonum(q)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', us))
    local live = redis.call('ZCARD', key)
    local take = 0
    if #cost > 0 then take = 1 end
    local last = 0
    if live > 0 then last = tonumber(redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]) end
    retry, reset = ZERO, ZERO
    if live + take <= max then
      ok, rem = true, num(max - live - take)
      if take > 0 then last = us + ttl end
    else
      ok, rem = false, ZERO
      local first = tonumber(redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2])
      retry = sub(num((first - us) * 1000), num(r))
    end
    if last > us then reset = sub(num((last - us) * 1000), num(r)) end
    st = {us + ttl, ttl}
  end
  if not ok then all = false end
  pend[i] = {kind, st, reset, cost}
  local j = 1 + (i - 1) * 5
  out[j + 1] = ok and 1 or 0
  out[j + 2] = tohex(rem)
  out[j + 3] = tohex(retry)
  out[j + 4] = tohex(reset)
  out[j + 5] = tohex(refund)
end
if not all then
  out[1] = 0
  for i = 1, n do out[1 + (i - 1) * 5 + 5] = tohex(ZERO) end
  return out
end
for i = 1, n do
  local p = pend[i]
  local kind, st, reset, cost = p[1], p[2], p[3], p[4]
  if #cost == 0 then
    out[1 + (i - 1) * 5 + 5] = tohex(ZERO)
  elseif kind == 'c' then
    redis.call('ZADD', KEYS[i], string.format('%d', st[1]), lease)
    if expire then redis.call('PEXPIRE', KEYS[i], string.format('%d', math.ceil(st[2] / 1000) + 1)) end
  else
    save(KEYS[i], kind, st, reset, expire)
  end
end
return out
