-- check_general.lua: the second half of check.lua's one script (embed_lua.py joins them;
-- the locals of check.lua are in scope here). check.lua answers the common checks inline and
-- returns; what is left comes here: every algorithm, one rule at a time, through the
-- functions below (period_of for quotas, sl_* for sliding logs, sw_reset and ceil_div for
-- sliding and fixed windows and token buckets), then "the check" decides every rule,
-- records when all allow, and answers.

-- The calendar period (1 day, 2 week from Monday, 3 month) holding t: its start and end,
-- as limit_period_start_ms / _end_ms do (civil_from_days there). t >= 0; every quotient
-- is floored as (a - a % b) / b: exact here, and no call to math.floor (a C call costs).
local function period_of(t, w)
  local DAY = 86400000
  local day = (t - t % DAY) / DAY
  if w == 1 then return day * DAY, (day + 1) * DAY end
  if w == 2 then
    local d = day - (day + 3) % 7                     -- 1970-01-01 was a Thursday
    return d * DAY, (d + 7) * DAY
  end
  local doe = (day + 719468) % 146097                 -- the day of its 400-year era (from 0000-03-01)
  local a = doe - (doe - doe % 1460) / 1460 + (doe - doe % 36524) / 36524 - (doe - doe % 146096) / 146096
  local yoe = (a - a % 365) / 365                     -- the year of the era (from March)
  local doy = doe - 365 * yoe - (yoe - yoe % 4) / 4 + (yoe - yoe % 100) / 100
  local b = 5 * doy + 2
  local mp = (b - b % 153) / 153                      -- months from March
  local c = 153 * mp + 2
  local first = day - doy + (c - c % 5) / 5           -- the month's first day
  local len
  if mp == 11 then                                    -- February, of the year after yoe
    local y = yoe + 1
    len = 28
    if y % 4 == 0 and (y % 100 ~= 0 or y % 400 == 0) then len = 29 end
  else
    c = c + 153
    len = (c - c % 5) / 5 - first + day - doy         -- days before the next month, less before this one
  end
  return first * DAY, (first + len) * DAY
end

local ceil, min = math.ceil, math.min

-- ---- sliding log ----

local EMPTY = {}

-- The first index in [a, b) whose time is after lo (the times there ascend; those before a
-- are not after lo), the times of up to K entries from it, ascending, and for a weighted
-- log (base given: the running total before entry a) their running totals and the running
-- total before the first (nil when no entry is after lo).
local function sl_scan(k, a, b, lo, base)
  local r = call('LRANGE', k, a, min(a + K, b) - 1)
  for x = 1, #r do
    local ti = unpack('>xI7', r[x])
    if ti > lo then
      local lt, lc = {}, {}
      for y = x, #r do
        if base then lt[y - x + 1], lc[y - x + 1] = unpack('>xI7I7', r[y])
        else lt[y - x + 1] = unpack('>xI7', r[y]) end
      end
      return a + x - 1, lt, lc, base
    end
    if base then base = unpack('>xxxxxxxxI7', r[x]) end
  end
  a = a + #r
  local step = 1
  while a < b do                                      -- gallop, then bisect
    local i = min(a + step - 1, b - 1)
    if unpack('>xI7', call('LINDEX', k, i)) > lo then
      while a < i do
        local mid = floor((a + i) / 2)
        if unpack('>xI7', call('LINDEX', k, mid)) > lo then i = mid else a = mid + 1 end
      end
      local lt, lc = {}, {}
      if base then
        r = call('LRANGE', k, a - 1, min(a + K, b) - 1)   -- from the entry before it
        base = unpack('>xxxxxxxxI7', r[1])
        for x = 2, #r do lt[x - 1], lc[x - 1] = unpack('>xI7I7', r[x]) end
      else
        r = call('LRANGE', k, a, min(a + K, b) - 1)
        for x = 1, #r do lt[x] = unpack('>xI7', r[x]) end
      end
      return a, lt, lc, base
    end
    a = i + 1
    step = step * 2
  end
  return b, EMPTY, EMPTY, nil
end

-- Decides a sliding-log rule (reads only; m: the key's last entry, when already read).
-- Returns the log as it stands at t: v (1 unweighted, 2 weighted), t, count (entries),
-- first (index of the first), used (units), base and cn (weighted: the running totals
-- before the first and of the last), oldest (the first's time), its oldest entries as
-- known: m and nk (l1..lnk of that tail) or lt/lc (times and running totals, ascending,
-- up to K), stale (replace the key), expire (set the TTL), mig (a log of the sorted-set
-- layout: every live time), grown (the log was recorded under a shorter window).
local function sl_decide(k, w, m)
  local t = now
  if m == nil then m = rpcall('LINDEX', k, '-1') end
  if type(m) == 'string' then
    local v = byte(m, 1)
    local tn, cn, wn, cnt, dead, base, j
    local u = 1                                       -- the unit of a log of one unit
    if v == 3 and #m == TAIL3_LEN then v, u = 1, unpack('>I7', m, 87) elseif v == 1 and #m ~= TAIL1_LEN then v = 0 end
    if v == 1 then
      tn, wn, cnt, dead, j = unpack('>xI7I7I7I7B', m)
      cn, base = cnt * u, 0
    elseif v == 2 and #m == TAIL2_LEN then
      tn, cn, wn, cnt, dead, base, j = unpack(HEAD2R, m)
    end
    if tn and j <= K and j <= cnt then
      if tn > t then t = tn end
      local lo, expire = t - w, true
      if wn == w then
        local e, p, o = 0, 24 + 7 * j, nil            -- l_j, the oldest known (weighted: 14 bytes on; c_j 56 more)
        if v == 2 then p = p + 14 end
        while e < j do
          o = unpack('>I7', m, p)
          if o > lo then break end
          if v == 2 then base = unpack('>I7', m, p + 56) end   -- it left the log
          e = e + 1
          p = p - 7
        end
        expire = floor(tn / w) ~= floor(t / w)
        if e < j or e == cnt then
          if e == j then o = nil end
          if v == 1 then cn, base = (cnt - e) * u, 0 end
          return {v = v, u = u, t = t, count = cnt - e, first = dead + e, used = (cn - base) % M, base = base, cn = cn,
                  oldest = o, m = m, nk = j - e, lt = EMPTY, lc = EMPTY, expire = expire}
        end
        dead, cnt = dead + j, cnt - j                 -- all known ones expired: read on
      end
      if v == 1 then base = nil end
      local f, lt, lc, b = sl_scan(k, dead, dead + cnt, lo, base)
      if v == 1 then cn, b = (dead + cnt - f) * u, 0 end
      b = b or cn
      return {v = v, u = u, t = t, count = dead + cnt - f, first = f, used = (cn - b) % M, base = b, cn = cn, oldest = lt[1],
              nk = 0, lt = lt, lc = lc, expire = expire, grown = wn < w}
    end
  elseif m and call('TYPE', k)['ok'] == 'zset' then   -- a log of the layout before
    local last = call('ZRANGE', k, -1, -1, 'WITHSCORES')
    local mig = {}
    if last[2] then
      local newest = tonumber(last[2])
      if newest > t then t = newest end
      if newest > t - w then
        local r = call('ZRANGEBYSCORE', k, fmt('(%d', t - w), '+inf', 'WITHSCORES')
        for x = 2, #r, 2 do mig[x / 2] = tonumber(r[x]) end
      end
    end
    return {v = 1, u = 1, t = t, count = #mig, first = 0, used = #mig, base = 0, cn = #mig, oldest = mig[1], nk = 0,
            lt = mig, lc = EMPTY, stale = true, expire = true, mig = mig}
  elseif not m then                                   -- no log yet
    return {v = 1, u = 1, t = t, count = 0, first = 0, used = 0, base = 0, cn = 0, nk = 0, lt = EMPTY, lc = EMPTY,
            expire = true}
  end
  return {v = 1, u = 1, t = t, count = 0, first = 0, used = 0, base = 0, cn = 0, nk = 0, lt = EMPTY, lc = EMPTY,
          stale = true, expire = true}                -- another type, or not a log of ours
end

-- Records the request (every rule allowed it): one entry of weight cost.
local function sl_record(k, w, L, cost)
  local t, count, dead, expire = L.t, L.count, L.first, L.expire
  local m, nk, lt, lc, mig, base, cn, u = L.m, L.nk, L.lt, L.lc, L.mig, L.base, L.cn, L.u
  -- The unit of the log after it, when its entries all weigh the same (else weighted).
  local unit
  if count == 0 then unit = cost
  elseif L.v == 1 and cost == u then unit = u
  elseif L.used == count and cost == 1 then unit = 1 end
  local weighted = not unit
  if weighted and L.v == 1 and count > 0 then
    -- entries without running totals: the log's live ones, rewritten with them (weight u)
    if not mig then
      mig = {}
      local m0, lt0 = m, lt
      if m0 and nk == count then                      -- all known: no read
        for x = 1, nk do mig[x] = unpack('>I7', m0, 24 + 7 * (nk - x + 1)) end
      elseif #lt0 == count then
        mig = lt0
      else
        for x = dead, dead + count - 1, 1000 do
          local r = call('LRANGE', k, x, min(x + 999, dead + count - 1))
          for y = 1, #r do mig[#mig + 1] = unpack('>xI7', r[y]) end
        end
      end
    end
    call('DEL', k)
    for x = 1, count, 1000 do
      local e = {}
      for y = x, min(x + 999, count) do e[#e + 1] = pack('>BI7I7', 2, mig[y], y * u) end
      call('RPUSH', k, tunpack(e))
    end
    dead, expire, base, cn, m, nk, lt, lc = 0, true, 0, count * u, nil, 0, {}, {}
    for x = 1, min(count, K) do lt[x], lc[x] = mig[x], x * u end
  elseif L.stale then
    call('DEL', k)
    dead = 0
    if mig then                                       -- the old log, first (weight 1 each)
      for x = 1, count, 1000 do
        local e = {}
        for y = x, min(x + 999, count) do e[#e + 1] = pack('>BI7', 1, mig[y]) end
        call('RPUSH', k, tunpack(e))
      end
    end
  end
  if L.v == 1 and weighted then m = nil end           -- (an empty log: nothing known)
  if dead >= TRIM then                                -- (when it empties the list, the key goes)
    call('LTRIM', k, dead, -1)
    dead, expire = 0, expire or count == 0
  end
  local off = 31                                      -- where m's times start
  if L.v == 2 then off = 45 end
  local tail
  if not weighted then
    local g = 1
    if unit > 1 then g = 3 end
    if m then
      if count == nk and nk < K then
        tail = pack(HEAD1, g, t, w, count + 1, dead, nk + 1) .. pack('>I7', t) .. sub(m, off, off + 48)
      else
        tail = pack(HEAD1, g, t, w, count + 1, dead, nk) .. sub(m, off, off + 55)
      end
    else
      local x = min(#lt, K)
      local d = {}                                    -- newest first, K of them
      if count == #lt and x < K then d[1] = t end
      for y = x, 1, -1 do d[#d + 1] = lt[y] end
      local j = #d
      for y = j + 1, K do d[y] = 0 end
      tail = pack(TAIL1, g, t, w, count + 1, dead, j, tunpack(d))
    end
    if g == 3 then tail = tail .. pack('>I7', unit) end
  else
    local cnew = (cn + cost) % M
    if m then                                         -- (weighted already)
      if count == nk and nk < K then
        tail = pack(HEAD2, 2, t, cnew, w, count + 1, dead, base, nk + 1) .. pack('>I7', t) .. sub(m, 45, 93) ..
               pack('>I7', cnew) .. sub(m, 101, 149)
      else
        tail = pack(HEAD2, 2, t, cnew, w, count + 1, dead, base, nk) .. sub(m, 45, TAIL2_LEN)
      end
    else
      local x = min(#lt, K)
      local ts, cs = {}, {}                           -- newest first, K of them
      if count == #lt and x < K then ts[1], cs[1] = t, cnew end
      for y = x, 1, -1 do ts[#ts + 1], cs[#cs + 1] = lt[y], lc[y] end
      local j = #ts
      for y = j + 1, K do ts[y], cs[y] = 0, 0 end
      tail = pack(HEAD2, 2, t, cnew, w, count + 1, dead, base, j) .. pack(LIST, tunpack(ts)) .. pack(LIST, tunpack(cs))
    end
  end
  call('RPUSH', k, tail)
  if expire then call('PEXPIRE', k, 2 * w) end
end

-- ---- sliding window, token bucket ----

-- Every quotient here has a numerator below 2^52, so float division is exact enough.
local function ceil_div(a, b) return ceil(a / b) end

local function sw_reset(c, w, e, cur, prev, avail)
  if avail >= c then return 0 end
  local r = (c - (cur + avail)) * w
  if prev > 0 and r > 0 then
    local d = w - e - ceil_div(r, prev) + 1
    if d < w - e then return d end
  end
  if cur == 0 then return w - e end
  local d2 = w - ceil_div((c - avail) * w, cur) + 1
  if d2 < 0 then d2 = 0 end
  return w - e + d2
end

-- ---- the check ----

local rules = {}
local all = 1

-- Decide every rule; read only.
for i = 1, n do
  local k = KEYS[i]
  local g, r, b, w, cost = unpack(RULE, spec, RULE_LEN * i - RULE_LEN + 1)
  local c = r + b
  local s = {g = g, r = r, c = c, w = w, k = cost}
  rules[i] = s
  if g == 0 then
    local m
    if mt then m = mt[i] elseif i == si then m = m1 end
    local L = sl_decide(k, w, m)
    s.sl, s.t = L, L.t
    s.ok = L.used + cost <= c
  elseif g == 4 then
    local live = rpcall('ZCOUNT', k, fmt('(%d', now), '+inf')
    if type(live) ~= 'number' then
      s.stale = true
      live = 0
    end
    local held = unpack('>I7', spec, RULE_LEN * i - RULE_LEN + 30)
    if live < held then live, lost = held, 2 end
    s.t, s.a = now, live
    s.ok = live < c
  else
    local t = now
    local h
    s.tag = fmt('%d:%d', g, w)
    if g == 1 then h = rpcall('HMGET', k, 'a', 'w', 'c', 'p')
    elseif g == 2 then h = rpcall('HMGET', k, 'a', 'l', 't')
    elseif g == 3 then h = rpcall('HMGET', k, 'a', 'w', 'n')
    else h = rpcall('HGETALL', k) end
    local have = false
    if h.err then s.stale = true
    elseif g == 5 then                                -- (a quota reads its fields below)
    elseif h[1] then
      if h[1] == s.tag then have = true else s.stale = true end
    end
    if g == 1 then
      local cur, prev = 0, 0
      local sw = have and tonumber(h[2])
      if have and t < sw * w then t = sw * w end
      local idx = floor(t / w)
      if have and idx == sw then cur, prev = tonumber(h[3]), tonumber(h[4])
      elseif have and idx == sw + 1 then prev = tonumber(h[3]) end
      local e = t - idx * w
      s.a, s.b, s.p = idx, cur, prev
      s.ok = prev * (w - e) + (cur + cost - 1) * w < c * w
    elseif g == 2 then
      local cw = c * w
      local level = cw
      if have then
        local lt = tonumber(h[3])
        if t < lt then t = lt end
        level = tonumber(h[2])
        if level >= cw or t - lt >= ceil_div(cw - level, r) then level = cw
        else level = level + (t - lt) * r end
      end
      s.a = level
      s.ok = level >= cost * w
    elseif g == 3 then
      local fw = have and tonumber(h[2])
      if have and t < fw * w then t = fw * w end
      local idx = floor(t / w)
      local count = 0
      if have and idx == fw then count = tonumber(h[3]) end
      s.a, s.b = idx, count
      s.ok = count + cost <= c
    else                                              -- quota; w is its period
      local qs, q, one = nil, 0, false
      if not h.err then                               -- the latest field of its kind of period, or the layout before
        local a, os, on
        for x = 1, #h, 2 do
          local f = h[x]
          if #f == 14 then
            local from, to = unpack('>I7I7', f)
            local ps, pe = period_of(from, w)
            if ps == from and pe == to and (not qs or from > qs) then qs, q = from, tonumber(h[x + 1]) end
          elseif f == 'a' then a = h[x + 1] elseif f == 's' then os = h[x + 1] elseif f == 'n' then on = h[x + 1] end
        end
        if qs then one = #h == 2
        elseif a == s.tag and os then qs, q = tonumber(os), tonumber(on) end
      end
      if qs and t < qs then t = qs end                -- a clock that went back stays in its period
      local start, stop = period_of(t, w)
      local used = 0
      if qs == start then used = q end
      s.a, s.b, s.e, s.f = start, used, stop, pack('>I7I7', start, stop)
      s.same = one and qs == start                    -- the hash is its period's field alone
      s.ok = used + cost <= c
    end
    s.t = t
  end
  if not s.ok then all = 0 end
end

-- Record (only when all allow, and not for a peek) and answer.
local record = all == 1 and not peek
local out = {now, all + lost}
for i = 1, n do
  local k, s = KEYS[i], rules[i]
  local g, c, w, r, t, cost = s.g, s.c, s.w, s.r, s.t, s.k
  local rem, reset
  if g == 0 then
    local L = s.sl
    local count, used = L.count, L.used
    local oldest = L.oldest
    if record then
      sl_record(k, w, L, cost)
      rem, reset = c - used - cost, (oldest or t) + w - t
    else
      if L.grown and not peek then call('PEXPIRE', k, 2 * w) end   -- the window grew: keep the log for it
      if s.ok then
        rem, reset = c - used, 0
        if count > 0 then reset = oldest + w - t end
      else                                            -- the oldest entry whose running total reaches need
        local need, o = used + cost - c, nil
        local lt, lc, base, m, nk = L.lt, L.lc, L.base, L.m, L.nk
        if L.v == 1 then                              -- weight u each: the ceil(need / u)-th oldest
          local u = L.u
          if u > 1 then need = (need + u - 1 - (need + u - 1) % u) / u end
          if m and need <= nk then o = unpack('>I7', m, 31 + 7 * (nk - need))
          elseif L.mig then o = L.mig[need]
          elseif lt[need] then o = lt[need]
          else o = unpack('>xI7', call('LINDEX', k, L.first + need - 1)) end
        else
          for x = nk, 1, -1 do                        -- l_nk, the oldest known, first
            if (unpack('>I7', m, 94 + 7 * x) - base) % M >= need then o = unpack('>I7', m, 38 + 7 * x) break end
          end
          for x = 1, #lt do
            if o then break end
            if (lc[x] - base) % M >= need then o = lt[x] end
          end
          if not o then                               -- past them: by running total
            local a, b = L.first + nk + #lt, L.first + count - 1   -- entry b reaches it: it is all of used
            while a < b do
              local mid = floor((a + b) / 2)
              if (unpack('>xxxxxxxxI7', call('LINDEX', k, mid)) - base) % M >= need then b = mid else a = mid + 1 end
            end
            o = unpack('>xI7', call('LINDEX', k, a))
          end
        end
        rem, reset = 0, o + w - t
      end
    end
  else
    if record and s.stale then call('DEL', k) end
    if g == 1 then
      local idx, cur, prev = s.a, s.b, s.p
      if record then
        cur = cur + cost
        call('HSET', k, 'a', s.tag, 'w', fmt('%d', idx), 'c', fmt('%d', cur), 'p', fmt('%d', prev))
        call('PEXPIRE', k, fmt('%d', 2 * w))
      end
      local e = t - idx * w
      if s.ok then
        local d = c * w - prev * (w - e)
        local avail = 0
        if d > 0 then avail = ceil_div(d, w) - cur end
        if avail < 0 then avail = 0 end
        rem, reset = avail, sw_reset(c, w, e, cur, prev, avail)
      else                                            -- wait until k units are admissible
        rem, reset = 0, sw_reset(c, w, e, cur, prev, cost - 1)
      end
    elseif g == 2 then
      local cw, level = c * w, s.a
      if record then
        level = level - cost * w
        call('HSET', k, 'a', s.tag, 'l', fmt('%d', level), 't', fmt('%d', t))
        local ttl = ceil_div(cw - level, r)
        if ttl < w then ttl = w end
        call('PEXPIRE', k, fmt('%d', ttl))
      end
      if s.ok then
        local avail = floor(level / w)
        rem, reset = avail, 0
        if level < cw then reset = ceil_div((avail + 1) * w - level, r) end
      else
        rem, reset = 0, ceil_div(cost * w - level, r)
      end
    elseif g == 3 then
      local idx, count = s.a, s.b
      if record then
        count = count + cost
        call('HSET', k, 'a', s.tag, 'w', fmt('%d', idx), 'n', fmt('%d', count))
        call('PEXPIRE', k, fmt('%d', w))
      end
      rem, reset = 0, 0
      if s.ok and count < c then rem = c - count end
      if count > 0 then reset = (idx + 1) * w - t end
    elseif g == 4 then
      local held = s.a
      if record then
        call('ZADD', k, fmt('%d', t + w), ARGV[3])
        local pt = call('PTTL', k)
        if pt < w then
          if pt >= 0 then call('ZREMRANGEBYSCORE', k, '-inf', fmt('%d', t)) end
          call('PEXPIRE', k, fmt('%d', 2 * w))
        end
        held = held + 1
      end
      if s.ok then rem, reset = c - held, 0 else rem, reset = 0, 1000 end
    else
      local used = s.b
      if record then
        used = used + cost
        if s.same then                                -- its period's field: the count alone moves
          call('HINCRBY', k, s.f, cost)
        else                                          -- a new period: the field alone, and the expiry
          if not s.stale then call('DEL', k) end
          call('HSET', k, s.f, fmt('%d', used))
          call('PEXPIRE', k, fmt('%d', s.e - t + QUOTA_GRACE))
        end
      end
      rem, reset = 0, s.e - t
      if s.ok then
        rem = c - used
        if used == 0 then reset = 0 end
      end
    end
  end
  local a = 0
  if s.ok then a = 1 end
  out[#out + 1] = a
  out[#out + 1] = c
  out[#out + 1] = rem
  out[#out + 1] = reset
end
return pack('>i7B' .. string.rep('Bi7i7i7', n), tunpack(out))
