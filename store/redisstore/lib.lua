-- sluice: exact integer arithmetic for Redis Lua (whose numbers are
-- doubles, exact only up to 2^53). A non-negative integer is a table of
-- limbs in base 2^24, least significant first, with no leading zero limbs
-- (zero is {}). Every limb product (< 2^48) plus carries stays below 2^53,
-- so every step is exact. Values cross the wire as 16 hex digits.
local B = 16777216
local floor = math.floor

local function norm(a)
  local n = #a
  while n > 0 and a[n] == 0 do a[n] = nil; n = n - 1 end
  return a
end

-- num makes limbs of a Lua number (a non-negative integer below 2^53).
local function num(x)
  local a, i = {}, 1
  while x > 0 do
    local r = x % B
    a[i] = r; x = (x - r) / B; i = i + 1
  end
  return a
end

-- tonum is the inverse of num (for values known to be below 2^53).
local function tonum(a)
  local x = 0
  for i = #a, 1, -1 do x = x * B + a[i] end
  return x
end

local function hex(h, i)
  i = i or 1
  return norm({tonumber(string.sub(h, i + 10, i + 15), 16), tonumber(string.sub(h, i + 4, i + 9), 16),
    tonumber(string.sub(h, i, i + 3), 16)})
end

local function tohex(a)
  return string.format('%04x%06x%06x', a[3] or 0, a[2] or 0, a[1] or 0)
end

local function cmp(a, b)
  if #a ~= #b then return #a < #b and -1 or 1 end
  for i = #a, 1, -1 do
    if a[i] ~= b[i] then return a[i] < b[i] and -1 or 1 end
  end
  return 0
end

local function add(a, b)
  local r, c = {}, 0
  for i = 1, math.max(#a, #b) do
    local s = (a[i] or 0) + (b[i] or 0) + c
    if s >= B then r[i] = s - B; c = 1 else r[i] = s; c = 0 end
  end
  if c > 0 then r[#r + 1] = c end
  return r
end

-- sub returns a - b for a >= b.
local function sub(a, b)
  local r, c = {}, 0
  for i = 1, #a do
    local s = a[i] - (b[i] or 0) - c
    if s < 0 then r[i] = s + B; c = 1 else r[i] = s; c = 0 end
  end
  if c > 0 or #b > #a then error('sluice: subtraction below zero') end
  return norm(r)
end

local function mul(a, b)
  local na, nb = #a, #b
  if na == 0 or nb == 0 then return {} end
  local r = {}
  for i = 1, na + nb do r[i] = 0 end
  for i = 1, na do
    local c, ai = 0, a[i]
    for j = 1, nb do
      local t = r[i + j - 1] + ai * b[j] + c
      c = floor(t / B)
      r[i + j - 1] = t - c * B
    end
    r[i + nb] = r[i + nb] + c
  end
  return norm(r)
end

-- divsmall divides a by a number 0 < d < 2^24: quotient limbs, remainder.
local function divsmall(a, d)
  local q, r = {}, 0
  for i = #a, 1, -1 do
    local cur = r * B + a[i]
    local qi = floor(cur / d)
    r = cur - qi * d
    if r < 0 then qi = qi - 1; r = r + d elseif r >= d then qi = qi + 1; r = r - d end
    q[i] = qi
  end
  return norm(q), r
end

-- divmod returns floor(a / b) and a mod b for b > 0 (Knuth's algorithm D).
local function divmod(a, b)
  if cmp(a, b) < 0 then return {}, a end
  local n = #b
  if n == 1 then
    local q, r = divsmall(a, b[1])
    return q, num(r)
  end
  local d = floor(B / (b[n] + 1))
  local u, v = mul(a, {d}), mul(b, {d})
  local m = #a - n
  for i = #u + 1, #a + 1 do u[i] = 0 end
  local q = {}
  local vn, vn1 = v[n], v[n - 1]
  for j = m, 0, -1 do
    local top = u[j + n + 1] * B + u[j + n]
    local qhat = floor(top / vn)
    local rhat = top - qhat * vn
    if rhat < 0 then qhat = qhat - 1; rhat = rhat + vn end
    while qhat >= B or qhat * vn1 > rhat * B + u[j + n - 1] do
      qhat = qhat - 1; rhat = rhat + vn
      if rhat >= B then break end
    end
    local borrow, carry = 0, 0
    for i = 1, n do
      local p = qhat * v[i] + carry
      carry = floor(p / B)
      local s = u[j + i] - (p - carry * B) - borrow
      if s < 0 then u[j + i] = s + B; borrow = 1 else u[j + i] = s; borrow = 0 end
    end
    local t = u[j + n + 1] - carry - borrow
    if t < 0 then
      qhat = qhat - 1
      local c = 0
      for i = 1, n do
        local s = u[j + i] + v[i] + c
        if s >= B then u[j + i] = s - B; c = 1 else u[j + i] = s; c = 0 end
      end
      t = t + c
    end
    u[j + n + 1] = t
    q[j + 1] = qhat
  end
  local r = {}
  for i = 1, n do r[i] = u[i] end
  local rr = divsmall(norm(r), d)
  return norm(q), rr
end

local ZERO, ONE = {}, {1}
local MAXINT = {B - 1, B - 1, 32767}   -- 2^63 - 1
local MAXSTATE = {0, 0, 16384}          -- 2^62
local MAXAHEAD = {0, 0, 8192}           -- 2^61

