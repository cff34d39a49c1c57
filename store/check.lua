-- check.lua: one atomic check of every rate rule of one subject (store/limiter_redis.c).
-- A line-by-line mirror of store/algorithms.c (see the meaning of the numbers there);
-- change both together: tests/unit/store/test_limiter_redis.c holds them to equal answers.
--
-- KEYS[i]            state of rule i: "<prefix>{<subject>}:<rule id>" (one slot per check)
--                      sliding-log:    sorted set, score = ms, member = "<ms>:<count before>"
--                      sliding-window: hash a=<tag> w=<window index> c=<count> p=<previous count>
--                      token-bucket:   hash a=<tag> l=<tokens * window_ms> t=<ms of l>
--                      fixed-window:   hash a=<tag> w=<window index> n=<count>
--                      concurrency:    sorted set, member = lease id, score = its expiry in ms
--                    tag = "<algorithm>:<window_ms>"; a key of another type or tag is stale
--                    and is treated as empty (and replaced when the request is recorded)
-- ARGV[1]            now in Unix ms, or negative: the server clock (TIME)
-- ARGV[4i-2 .. 4i+1] rule i: algorithm (0 sliding-log, 1 sliding-window, 2 token-bucket,
--                    3 fixed-window, 4 concurrency), rate, burst, window_ms
--                    (concurrency: rate = N slots, burst 0, window_ms = the lease TTL)
-- ARGV[4n+2]         the lease id; present only when some rule is a concurrency rule
-- Returns {now, all_allowed, then per rule: allowed, limit, remaining, reset_ms}.
-- Reads first; writes (with a TTL on every key written) only when every rule allows.
-- A concurrency rule counts the leases whose expiry is after now (live); it allows when
-- live < N, and then drops the expired ones, adds the lease with score now + TTL and makes
-- sure the key lives at least TTL longer. Verdict: remaining N - held, reset 1000 when
-- rejected (when a lease ends is unknowable). store/renew.lua keeps held leases alive.

local fmt = string.format   -- '%d' keeps integers exact (a number argument may become "1e+9")
local floor, ceil = math.floor, math.ceil
local call, rpcall = redis.call, redis.pcall

local now = tonumber(ARGV[1])
if now < 0 then
  local tm = call('TIME')
  now = tonumber(tm[1]) * 1000 + floor(tonumber(tm[2]) / 1000)
end

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

local n = #KEYS
local alg, cap, rate, win, tag = {}, {}, {}, {}, {}
local te, va, vb, vc, stale = {}, {}, {}, {}, {}
local ok = {}
local all = 1

-- Decide every rule; read only.
for i = 1, n do
  local k, j = KEYS[i], 4 * i - 2
  local g, r, w = tonumber(ARGV[j]), tonumber(ARGV[j + 1]), tonumber(ARGV[j + 3])
  local c = r + tonumber(ARGV[j + 2])
  alg[i], rate[i], cap[i], win[i] = g, r, c, w
  local t = now
  stale[i] = false
  if g == 0 then
    local last = rpcall('ZRANGE', k, -1, -1, 'WITHSCORES')
    local count = 0
    vb[i] = false                                  -- key exists: trim before adding
    if last.err then
      stale[i] = true
    elseif last[2] then
      vb[i] = true
      local newest = tonumber(last[2])
      if newest > t then t = newest end
      if newest > t - w then count = call('ZCOUNT', k, fmt('(%d', t - w), '+inf') end
    end
    va[i] = count
    ok[i] = count < c
  elseif g == 4 then
    local live = rpcall('ZCOUNT', k, fmt('(%d', t), '+inf')
    if type(live) ~= 'number' then
      stale[i] = true
      live = 0
    end
    va[i] = live
    ok[i] = live < c
  else
    local h
    tag[i] = ARGV[j] .. ':' .. ARGV[j + 3]
    if g == 1 then h = rpcall('HMGET', k, 'a', 'w', 'c', 'p')
    elseif g == 2 then h = rpcall('HMGET', k, 'a', 'l', 't')
    else h = rpcall('HMGET', k, 'a', 'w', 'n') end
    local have = false
    if h.err then stale[i] = true
    elseif h[1] then
      if h[1] == tag[i] then have = true else stale[i] = true end
    end
    if g == 1 then
      local cur, prev = 0, 0
      local sw = have and tonumber(h[2])
      if have and t < sw * w then t = sw * w end
      local idx = floor(t / w)
      if have and idx == sw then cur, prev = tonumber(h[3]), tonumber(h[4])
      elseif have and idx == sw + 1 then prev = tonumber(h[3]) end
      local e = t - idx * w
      va[i], vb[i], vc[i] = idx, cur, prev
      ok[i] = prev * (w - e) + cur * w < c * w
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
      va[i] = level
      ok[i] = level >= w
    else
      local fw = have and tonumber(h[2])
      if have and t < fw * w then t = fw * w end
      local idx = floor(t / w)
      local count = 0
      if have and idx == fw then count = tonumber(h[3]) end
      va[i], vb[i] = idx, count
      ok[i] = count < c
    end
  end
  te[i] = t
  if not ok[i] then all = 0 end
end

-- Record (only when all allow) and answer.
local out = {now, all}
for i = 1, n do
  local k, g, c, w, r, t = KEYS[i], alg[i], cap[i], win[i], rate[i], te[i]
  local rem, reset
  if all == 1 then
    if stale[i] then call('DEL', k) end
  end
  if g == 0 then
    local count = va[i]
    if all == 1 then
      if vb[i] and not stale[i] then call('ZREMRANGEBYSCORE', k, '-inf', fmt('%d', t - w)) end
      local oldest = t
      if count > 0 then oldest = tonumber(call('ZRANGE', k, 0, 0, 'WITHSCORES')[2]) end
      call('ZADD', k, fmt('%d', t), fmt('%d:%d', t, count))
      call('PEXPIRE', k, fmt('%d', w))
      count = count + 1
      rem, reset = c - count, oldest + w - t
    elseif ok[i] then
      rem, reset = c - count, 0
      if count > 0 then
        local o = call('ZRANGEBYSCORE', k, fmt('(%d', t - w), '+inf', 'WITHSCORES', 'LIMIT', '0', '1')
        reset = tonumber(o[2]) + w - t
      end
    else
      local o = call('ZRANGEBYSCORE', k, fmt('(%d', t - w), '+inf', 'WITHSCORES', 'LIMIT', fmt('%d', count - c), '1')
      rem, reset = 0, tonumber(o[2]) + w - t
    end
  elseif g == 1 then
    local idx, cur, prev = va[i], vb[i], vc[i]
    if all == 1 then
      cur = cur + 1
      call('HSET', k, 'a', tag[i], 'w', fmt('%d', idx), 'c', fmt('%d', cur), 'p', fmt('%d', prev))
      call('PEXPIRE', k, fmt('%d', 2 * w))
    end
    local e = t - idx * w
    local d = c * w - prev * (w - e)
    local avail = 0
    if d > 0 then avail = ceil_div(d, w) - cur end
    if avail < 0 then avail = 0 end
    rem, reset = avail, sw_reset(c, w, e, cur, prev, avail)
  elseif g == 2 then
    local cw, level = c * w, va[i]
    if all == 1 then
      level = level - w
      call('HSET', k, 'a', tag[i], 'l', fmt('%d', level), 't', fmt('%d', t))
      local ttl = ceil_div(cw - level, r)
      if ttl < w then ttl = w end
      call('PEXPIRE', k, fmt('%d', ttl))
    end
    local avail = floor(level / w)
    rem, reset = avail, 0
    if level < cw then reset = ceil_div((avail + 1) * w - level, r) end
  elseif g == 3 then
    local idx, count = va[i], vb[i]
    if all == 1 then
      count = count + 1
      call('HSET', k, 'a', tag[i], 'w', fmt('%d', idx), 'n', fmt('%d', count))
      call('PEXPIRE', k, fmt('%d', w))
    end
    rem, reset = 0, 0
    if count < c then rem = c - count end
    if count > 0 then reset = (idx + 1) * w - t end
  elseif g == 4 then
    local held = va[i]
    if all == 1 then
      call('ZREMRANGEBYSCORE', k, '-inf', fmt('%d', t))
      call('ZADD', k, fmt('%d', t + w), ARGV[4 * n + 2])
      if call('PTTL', k) < w then call('PEXPIRE', k, fmt('%d', w)) end
      held = held + 1
    end
    if ok[i] then rem, reset = c - held, 0 else rem, reset = 0, 1000 end
  end
  local a = 0
  if ok[i] then a = 1 end
  out[#out + 1] = a
  out[#out + 1] = c
  out[#out + 1] = rem
  out[#out + 1] = reset
end
return out
