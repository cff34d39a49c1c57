-- check.lua: one atomic check of every rule (rate and concurrency) of one subject
-- (store/limiter_redis.c).
-- The same arithmetic as store/algorithms.c (see the meaning of the numbers there); change
-- both together: tests/unit/store/test_limiter_redis.c holds them to equal answers.
--
-- KEYS[i]            state of rule i: "<prefix>{<subject>}:<rule id>" (one slot per check)
-- ARGV[1]            now in Unix ms, or negative: the server clock (TIME)
-- ARGV[4i-2 .. 4i+1] rule i: kind (enum limit_kind: 0 sliding-log, 1 sliding-window,
--                    2 token-bucket, 3 fixed-window, 4 concurrency), rate, burst, window_ms
--                    (concurrency: rate = N slots, burst 0, window_ms = the lease TTL)
-- ARGV[4n+2]         the lease id; present only when some rule is a concurrency rule
-- Returns {now, all_allowed, then per rule: allowed, limit, remaining, reset_ms}.
-- Reads first; writes (with a TTL on every key written) only when every rule allows; the
-- one write otherwise: a sliding log whose window grew (a limit changed in place) gets the
-- new window's TTL, so its entries still count past the old window's.
-- C = rate + burst; t = now, or the state's newest time when that is later (a clock that
-- goes backwards is clamped).
--
-- Sliding log: a list, one entry per admitted request, oldest first (times never decrease).
--   Every entry starts with byte 1 and its time in ms (7-byte big-endian). The last entry
--   (the tail) also carries the state, so that a check reads one entry and writes one:
--     struct '>BI7I7I7I7B' .. 8 x 'I7': 1, t, w, count, dead, j, l1..l8
--   w      the window it was recorded under;
--   dead   the entries at the head that have left the log (kept for a later LTRIM): the
--          log is entries dead .. dead + count - 1, all in (t - w, t], the tail included;
--   l1..lj the times of the j oldest entries of the log, newest first (j <= 8; slots past
--          j are meaningless). Past them the times are read with LRANGE / LINDEX.
--   Entries other than the tail are only read for their time. A check at t' >= t counts
--   the log's entries later than t' - w: those of l1..lj that are (all of them when
--   j = count), else it reads on from entry dead + j. A different window re-reads the log.
--   An admitted request drops the expired entries from the log (dead grows; LTRIM once 32
--   are dead), pushes its entry, and sets the TTL to 2w when the key is new or its newest
--   entry is of an earlier w-aligned period (floor(t / w) changed): so the TTL is set at
--   the first request of each period and the key outlives its newest entry by at least w.
--   A sorted set (the layout before: score = ms, member = "<ms>:<count before>") is read
--   as the log it is and rewritten as a list when a request is admitted (the script
--   before takes a list for a stale key: the two must not share a Redis).
--   Verdict, on the log after the check: remaining C - count, reset = its oldest + w - t
--   (0 when it is empty); a rejected request waits for the (count - C + 1)th oldest.
-- Sliding window: hash a=<tag> w=<window index> c=<count> p=<previous count>, TTL 2w.
-- Token bucket:   hash a=<tag> l=<tokens * window_ms> t=<ms of l>.
-- Fixed window:   hash a=<tag> w=<window index> n=<count>, TTL w.
--   tag = "<kind>:<window_ms>"; a hash of another tag, or a key of another type, is
--   stale: treated as empty and replaced when the request is recorded.
-- Concurrency: sorted set, member = lease id, score = its expiry in ms. It counts the
--   leases whose expiry is after now (live); it allows when live < N, and then drops the
--   expired ones, adds the lease with score now + TTL and makes sure the key lives at least
--   TTL longer. Verdict: remaining N - held, reset 1000 when rejected (when a lease ends is
--   unknowable). store/renew.lua keeps held leases alive.

local floor, byte, type, tonumber = math.floor, string.byte, type, tonumber
local call, rpcall = redis.call, redis.pcall
local tunpack = unpack
local pack, unpack = struct.pack, struct.unpack

local now = tonumber(ARGV[1])
if now < 0 then
  local tm = call('TIME')
  now = tm[1] * 1000 + floor(tm[2] / 1000)
end
local n = #KEYS

local K = 8                                           -- times kept in a sliding log's tail
local TAIL = '>BI7I7I7I7BI7I7I7I7I7I7I7I7'            -- 1, t, w, count, dead, j, l1..l8
local LIST = '>I7I7I7I7I7I7I7I7'                      -- l1..l8, from byte 31
local TAIL_LEN = 30 + 7 * K
local TRIM = 32                                       -- dead entries worth an LTRIM

-- The common check, inline (function definitions cost every call): one sliding-log rule
-- whose tail, or the K entries after its known ones, know enough. The same steps as
-- sl_decide and sl_record below, which do the rest (and all of it for more rules).
local m1                                              -- rule 1's last entry, once read
if n == 1 and ARGV[2] == '0' then
  local k, w = KEYS[1], tonumber(ARGV[5])
  m1 = rpcall('LINDEX', k, '-1')
  if type(m1) == 'string' and #m1 == TAIL_LEN and byte(m1, 1) == 1 then
    local tn, wn, cnt, dead, j = unpack('>xI7I7I7I7B', m1)
    if wn == w and j <= K and j <= cnt then
      local t = now
      if tn > t then t = tn end
      local lo = t - w
      local e, p, o = 0, 24 + 7 * j, t                -- l_j, the oldest known, at byte 31 + 7(j-1)
      while e < j do
        o = unpack('>I7', m1, p)
        if o > lo then break end
        e = e + 1
        p = p - 7
      end
      local count, nk, r, rx = cnt - e, j - e, nil, 0
      if e == j and e < cnt then                      -- all known ones left: the next K
        r = call('LRANGE', k, dead + e, dead + e + K - 1)
        nk = -1                                       -- unless one of them is in the window
        for x = 1, #r do
          o = unpack('>xI7', r[x])
          if o > lo then
            rx, e = x - 1, e + x - 1
            count, nk = cnt - e, #r - rx
            break
          end
        end
      end
      if nk >= 0 then
        local c = tonumber(ARGV[3]) + tonumber(ARGV[4])
        if count < c then
          dead = dead + e
          local expire = floor(tn / w) ~= floor(t / w)
          if dead >= TRIM then                        -- (when it empties the list, the key goes)
            call('LTRIM', k, dead, -1)
            dead, expire = 0, expire or count == 0
          end
          local tail
          if r then
            local d = {}                              -- newest first, K of them
            if count == nk and nk < K then d[1] = t end
            for x = #r, rx + 1, -1 do d[#d + 1] = unpack('>xI7', r[x]) end
            local jn = #d
            for x = jn + 1, K do d[x] = 0 end
            tail = pack(TAIL, 1, t, w, count + 1, dead, jn, tunpack(d))
          elseif count == nk and nk < K then
            tail = pack(TAIL, 1, t, w, count + 1, dead, nk + 1, t, unpack(LIST, m1, 31))
          else
            tail = pack(TAIL, 1, t, w, count + 1, dead, nk, unpack(LIST, m1, 31))
          end
          call('RPUSH', k, tail)
          if expire then call('PEXPIRE', k, 2 * w) end
          if count == 0 then o = t end
          return {now, 1, 1, c, c - count - 1, o + w - t}
        end
        if count - c < nk then                        -- rejected: wait for the (count - C + 1)th oldest
          if r then o = unpack('>xI7', r[rx + count - c + 1])
          else o = unpack('>I7', m1, 24 + 7 * (nk - count + c)) end
          return {now, 0, 0, c, 0, o + w - t}
        end
      end
    end
  end
end

local fmt = string.format   -- '%d' keeps integers exact (a number argument may become "1e+9")
local ceil, min = math.ceil, math.min

-- ---- sliding log ----

local function sl_time(e) return (unpack('>xI7', e)) end

-- The first index in [a, b) whose time is after lo (the times there ascend; those before a
-- are not after lo), or b; and up to K times from it, ascending.
local function sl_scan(k, a, b, lo)
  local r = call('LRANGE', k, a, min(a + K, b) - 1)
  for x = 1, #r do
    if sl_time(r[x]) > lo then
      local l = {}
      for y = x, #r do l[y - x + 1] = sl_time(r[y]) end
      return a + x - 1, l
    end
  end
  a = a + #r
  local step = 1
  while a < b do                                      -- gallop, then bisect
    local i = min(a + step - 1, b - 1)
    if sl_time(call('LINDEX', k, i)) > lo then
      while a < i do
        local mid = floor((a + i) / 2)
        if sl_time(call('LINDEX', k, mid)) > lo then i = mid else a = mid + 1 end
      end
      local l = {}
      r = call('LRANGE', k, a, min(a + K, b) - 1)
      for x = 1, #r do l[x] = sl_time(r[x]) end
      return a, l
    end
    a = i + 1
    step = step * 2
  end
  return b, {}
end

-- Decides a sliding-log rule (reads only; m: the key's last entry, when already read).
-- Returns t, count, first (index of the log's first entry), oldest (its time; nil when
-- count = 0), stale (replace the key), expire (set the TTL), the known oldest times of
-- the log: m, nk (l1..lnk of that tail), or l (ascending, a prefix of the log), or mig (the
-- whole log, from a sorted set); and grown (the log was recorded under a shorter window).
local function sl_decide(k, w, m)
  local t = now
  if m == nil then m = rpcall('LINDEX', k, '-1') end
  if type(m) == 'string' then
    if #m == TAIL_LEN and byte(m, 1) == 1 then
      local tn, wn, cnt, dead, j = unpack('>xI7I7I7I7B', m)
      if j <= K and j <= cnt then
        if tn > t then t = tn end
        local lo, expire = t - w, true
        if wn == w then
          local e, p, o = 0, 24 + 7 * j, nil          -- l_j, the oldest known, at byte 31 + 7(j-1)
          while e < j do
            o = unpack('>I7', m, p)
            if o > lo then break end
            e = e + 1
            p = p - 7
          end
          expire = floor(tn / w) ~= floor(t / w)
          if e < j then return t, cnt - e, dead + e, o, false, expire, m, j - e end
          if e == cnt then return t, 0, dead + e, nil, false, expire, m, 0 end
          dead, cnt = dead + j, cnt - j               -- all known ones expired: read on
        end
        local f, l = sl_scan(k, dead, dead + cnt, lo)
        return t, dead + cnt - f, f, l[1], false, expire, nil, 0, l, nil, wn < w
      end
    end
  elseif m and call('TYPE', k)['ok'] == 'zset' then   -- a log of the layout before
    local last = call('ZRANGE', k, -1, -1, 'WITHSCORES')
    local l = {}
    if last[2] then
      local newest = tonumber(last[2])
      if newest > t then t = newest end
      if newest > t - w then
        local r = call('ZRANGEBYSCORE', k, fmt('(%d', t - w), '+inf', 'WITHSCORES')
        for x = 2, #r, 2 do l[x / 2] = tonumber(r[x]) end
      end
    end
    return t, #l, 0, l[1], true, true, nil, 0, nil, l
  elseif not m then
    return t, 0, 0, nil, false, true, nil, 0          -- no log yet
  end
  return t, 0, 0, nil, true, true, nil, 0             -- another type, or not a log of ours
end

-- The x-th (from 0) oldest time of the log, for a rejected request.
local function sl_at(k, x, first, m, nk, l, mig)
  if m then
    if x < nk then return (unpack('>I7', m, 24 + 7 * (nk - x))) end
  elseif mig then
    return mig[x + 1]
  elseif l and l[x + 1] then
    return l[x + 1]
  end
  return sl_time(call('LINDEX', k, first + x))
end

-- Records the request (every rule allowed it).
local function sl_record(k, w, t, count, dead, stale, expire, m, nk, l, mig)
  if stale then call('DEL', k) end
  if dead >= TRIM then                                -- (when it empties the list, the key goes)
    call('LTRIM', k, dead, -1)
    dead, expire = 0, expire or count == 0
  end
  local tail
  if m then
    if count == nk and nk < K then
      tail = pack(TAIL, 1, t, w, count + 1, dead, nk + 1, t, unpack(LIST, m, 31))
    else
      tail = pack(TAIL, 1, t, w, count + 1, dead, nk, unpack(LIST, m, 31))
    end
  else
    l = l or mig or {}
    local n = min(#l, K)
    local d = {}                                      -- newest first, K of them
    if count == #l and n < K then d[1] = t end
    for x = n, 1, -1 do d[#d + 1] = l[x] end
    local j = #d
    for x = j + 1, K do d[x] = 0 end
    tail = pack(TAIL, 1, t, w, count + 1, dead, j, tunpack(d))
    if mig then                                       -- the rest of the old log, first
      local x = 1
      while x <= count do
        local e = {}
        for y = x, min(x + 999, count) do e[#e + 1] = pack('>BI7', 1, mig[y]) end
        call('RPUSH', k, tunpack(e))
        x = x + 1000
      end
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
  local k, j = KEYS[i], 4 * i - 2
  local g, r, w = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 3])
  local c = r + tonumber(ARGV[j + 2])
  local s = {g = g, r = r, c = c, w = w}
  rules[i] = s
  if g == 0 then
    local m
    if i == 1 then m = m1 end
    s.sl = {sl_decide(k, w, m)}                       -- t, count, first, oldest, stale, expire, m, nk, l, mig, grown
    s.t = s.sl[1]
    s.ok = s.sl[2] < c
  elseif g == 4 then
    local live = rpcall('ZCOUNT', k, fmt('(%d', now), '+inf')
    if type(live) ~= 'number' then
      s.stale = true
      live = 0
    end
    s.t, s.a = now, live
    s.ok = live < c
  else
    local t = now
    local h
    s.tag = ARGV[j] .. ':' .. ARGV[j + 3]
    if g == 1 then h = rpcall('HMGET', k, 'a', 'w', 'c', 'p')
    elseif g == 2 then h = rpcall('HMGET', k, 'a', 'l', 't')
    else h = rpcall('HMGET', k, 'a', 'w', 'n') end
    local have = false
    if h.err then s.stale = true
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
      s.ok = prev * (w - e) + cur * w < c * w
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
      s.ok = level >= w
    else
      local fw = have and tonumber(h[2])
      if have and t < fw * w then t = fw * w end
      local idx = floor(t / w)
      local count = 0
      if have and idx == fw then count = tonumber(h[3]) end
      s.a, s.b = idx, count
      s.ok = count < c
    end
    s.t = t
  end
  if not s.ok then all = 0 end
end

-- Record (only when all allow) and answer.
local out = {now, all}
for i = 1, n do
  local k, s = KEYS[i], rules[i]
  local g, c, w, r, t = s.g, s.c, s.w, s.r, s.t
  local rem, reset
  if g == 0 then
    local sl = s.sl
    local count, first, oldest = sl[2], sl[3], sl[4]
    if all == 1 then
      sl_record(k, w, t, count, first, sl[5], sl[6], sl[7], sl[8], sl[9], sl[10])
      rem, reset = c - count - 1, (oldest or t) + w - t
    else
      if sl[11] then call('PEXPIRE', k, 2 * w) end    -- the window grew: keep the log for it
      if s.ok then
        rem, reset = c - count, 0
        if count > 0 then reset = oldest + w - t end
      else
        rem, reset = 0, sl_at(k, count - c, first, sl[7], sl[8], sl[9], sl[10]) + w - t
      end
    end
  else
    if all == 1 and s.stale then call('DEL', k) end
    if g == 1 then
      local idx, cur, prev = s.a, s.b, s.p
      if all == 1 then
        cur = cur + 1
        call('HSET', k, 'a', s.tag, 'w', fmt('%d', idx), 'c', fmt('%d', cur), 'p', fmt('%d', prev))
        call('PEXPIRE', k, fmt('%d', 2 * w))
      end
      local e = t - idx * w
      local d = c * w - prev * (w - e)
      local avail = 0
      if d > 0 then avail = ceil_div(d, w) - cur end
      if avail < 0 then avail = 0 end
      rem, reset = avail, sw_reset(c, w, e, cur, prev, avail)
    elseif g == 2 then
      local cw, level = c * w, s.a
      if all == 1 then
        level = level - w
        call('HSET', k, 'a', s.tag, 'l', fmt('%d', level), 't', fmt('%d', t))
        local ttl = ceil_div(cw - level, r)
        if ttl < w then ttl = w end
        call('PEXPIRE', k, fmt('%d', ttl))
      end
      local avail = floor(level / w)
      rem, reset = avail, 0
      if level < cw then reset = ceil_div((avail + 1) * w - level, r) end
    elseif g == 3 then
      local idx, count = s.a, s.b
      if all == 1 then
        count = count + 1
        call('HSET', k, 'a', s.tag, 'w', fmt('%d', idx), 'n', fmt('%d', count))
        call('PEXPIRE', k, fmt('%d', w))
      end
      rem, reset = 0, 0
      if count < c then rem = c - count end
      if count > 0 then reset = (idx + 1) * w - t end
    elseif g == 4 then
      local held = s.a
      if all == 1 then
        call('ZREMRANGEBYSCORE', k, '-inf', fmt('%d', t))
        call('ZADD', k, fmt('%d', t + w), ARGV[4 * n + 2])
        if call('PTTL', k) < w then call('PEXPIRE', k, fmt('%d', w)) end
        held = held + 1
      end
      if s.ok then rem, reset = c - held, 0 else rem, reset = 0, 1000 end
    end
  end
  local a = 0
  if s.ok then a = 1 end
  out[#out + 1] = a
  out[#out + 1] = c
  out[#out + 1] = rem
  out[#out + 1] = reset
end
return out
