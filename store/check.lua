-- check.lua: one atomic check of every rule (rate, quota and concurrency) of one subject
-- (store/limiter_redis.c).
-- The same arithmetic as store/algorithms.c (see the meaning of the numbers there); change
-- both together: tests/unit/store/test_limiter_redis.c holds them to equal answers.
--
-- KEYS[i]            state of rule i: "<prefix>{<subject>}:<rule id>" (one slot per check)
-- ARGV[1]            now in Unix ms, or negative: the server clock (TIME); "peek:<now>":
--                    decide and answer every rule, record nothing (limiter_peek)
-- ARGV[2]            the rules, 43 bytes each, rule i from byte 43(i-1)+1: struct
--                    '>BI7I7I7I7I7I7' kind (enum limit_kind: 0 sliding-log, 1 sliding-window,
--                    2 token-bucket, 3 fixed-window, 4 concurrency, 5 quota), rate, burst,
--                    window_ms (a quota: its period, enum limit_period: 1 day, 2 week,
--                    3 month), cost (>= 1: the units this request counts; concurrency: 1),
--                    from, to (a quota: the period holding now on the proxy's clock, which
--                    spares the calendar arithmetic when it holds the script's now; else 0)
--                    (concurrency: rate = N slots, burst 0, window_ms = the lease TTL, from =
--                    the leases of this subject and rule the calling proxy holds: a set that
--                    counts fewer lost some (flushed, restarted empty), and the check counts
--                    the proxy's instead).
--                    One string, not 5 arguments a rule: each argument costs Redis a
--                    string and a table slot per call.
-- ARGV[3]            the lease id; present only when some rule is a concurrency rule
-- Returns one string, struct '>i7B' .. n x 'Bi7i7i7': now, all_allowed (plus 2 when a
-- concurrency set held fewer leases than the proxy said it holds), then per rule:
-- allowed, limit, remaining, reset_ms (a string, not an array of integers: Redis makes a
-- reply of each integer, a cost paid per check).
-- Reads first; writes (with a TTL on every key written) only when every rule allows; the
-- one write otherwise: a sliding log whose window grew (a limit changed in place) gets the
-- new window's TTL, so its entries still count past the old window's.
-- C = rate + burst; k = cost; t = now, or the state's newest time when that is later (a
-- clock that goes backwards is clamped). A request of cost k is allowed when k requests of
-- cost 1 would all be, and counts as k units.
--
-- Sliding log: a list, one entry per admitted request, oldest first (times never
--   decrease). Every entry starts with a tag byte and its time in ms (7-byte big-endian).
--   The last entry (the tail) also carries the state, so that a check reads one entry and
--   writes one. A log is in one of two layouts, chosen at each admitted request:
--   unweighted (every live entry weighs 1; tag 1, the layout of the proxies before costs),
--     tail struct '>BI7I7I7I7B' .. 8 x 'I7': 1, t, w, count, dead, j, l1..l8;
--   of one unit u >= 2 (every live entry weighs u: a route's requests all cost the same;
--     tag 3), the same tail and then u: '>BI7I7I7I7B' .. 8 x 'I7' .. 'I7' (93 bytes);
--   weighted (some live entry weighs more; tag 2): every entry also carries cum, the
--     running total of the weights (costs) pushed to the log up to it, mod 2^52 (a
--     difference of two, mod 2^52, is exact: a log never holds C >= 2^52 units):
--     entry '>BI7I7': 2, t, cum; tail struct '>BI7I7I7I7I7I7B' .. 8 x 'I7' .. 8 x 'I7':
--     2, t, cum, w, count, dead, base, j, l1..l8, c1..c8.
--   w      the window it was recorded under;
--   dead   the entries at the head that have left the log (kept for a later LTRIM): the
--          log is entries dead .. dead + count - 1, all in (t - w, t], the tail included;
--   base   the running total before entry dead: the log weighs (cum - base) mod 2^52
--          (unweighted: count);
--   l1..lj (c1..cj)  the times (and running totals) of the j oldest entries of the log,
--          newest first (j <= 8; slots past j are meaningless). Past them the entries are
--          read with LRANGE / LINDEX.
--   Entries other than the tail are only read for their time (and running total). A check
--   at t' >= t counts the log's entries later than t' - w: those of l1..lj that are (all
--   of them when j = count), else it reads on from entry dead + j. A different window
--   re-reads the log. A rejected request of cost k waits for the oldest entry whose
--   running total from the log's start reaches used + k - C. An admitted request drops the
--   expired entries from the log (dead grows; LTRIM once 32 are dead), pushes its entry,
--   and sets the TTL to 2w when the key is new or its newest entry is of an earlier
--   w-aligned period (floor(t / w) changed): so the TTL is set at the first request of
--   each period and the key outlives its newest entry by at least w.
--   Layouts: a log stays in the layout of one unit (1 or u) while its requests cost that
--   unit (the hot path is that of the proxies before costs, entries of 86 or 93 bytes); the
--   first admitted request of another cost rewrites its live entries with running totals
--   (once per entry, amortized); an empty log (every entry left) takes the unit of the
--   request it admits; a weighted log becomes unweighted again with the first cost-1
--   request after its last heavier entry left (a tail of one unit reads only the times of
--   the entries before it). A log of unit u counts count * u units, and a request of cost u
--   fits while count < floor(C / u).
--   A sorted set (the layout before those: score = ms, member = "<ms>:<count before>")
--   is read as the log it is and rewritten as a list when a request is admitted.
--   Verdict, on the log after the check: remaining C - used, reset = its oldest + w - t
--   (0 when it is empty).
-- Sliding window: hash a=<tag> w=<window index> c=<count> p=<previous count>, TTL 2w.
-- Token bucket:   hash a=<tag> l=<tokens * window_ms> t=<ms of l>.
-- Fixed window:   hash a=<tag> w=<window index> n=<count>, TTL w.
-- Quota:          hash of one field, the period's start and end ('>I7I7', 14 bytes: the
--   period is known by its length) = units used in it, expiring a minute after the
--   period's end (PEXPIRE end - t + QUOTA_GRACE). A hash without the field of the period
--   holding t reads as 0 units, so a new period starts from 0 without a sweep. Written
--   whole (with its expiry) at a period's first admitted request; after that an admitted
--   request is one HINCRBY of its field, whose answer is the verdict (undone at once,
--   HINCRBY -cost, should it go over: rare, the denial cache answers the repeats). The
--   layout before (a=<tag> s=<start> n=<used>) is read as the period it holds and
--   rewritten at the next admitted request.
-- tag = "<kind>:<window_ms>"; a hash of another tag, or a key of another type, is stale:
--   treated as empty and replaced when the request is recorded.
-- Concurrency: sorted set, member = lease id, score = its expiry in ms. It counts the
--   leases whose expiry is after now (live); it allows when live < N, and then adds the
--   lease with score now + TTL and makes sure the key lives at least TTL longer: when it
--   has less left, it gets 2 TTL and the expired leases are dropped (so once per TTL, not
--   every check: leases end by ZREM or by their score; an expired one only takes room). A
--   key without a TTL was made by that ZADD (the last ZREM of a set deletes it): nothing
--   to drop. Verdict: remaining N - held, reset 1000 when rejected (when a lease ends is
--   unknowable). store/renew.lua keeps held leases alive.

local floor, byte, sub, type, tonumber = math.floor, string.byte, string.sub, type, tonumber
local call, rpcall = redis.call, redis.pcall
local tunpack = unpack
local pack, unpack = struct.pack, struct.unpack

local now, peek = -1, false
local lost = 0                                        -- 2: a concurrency set held fewer leases than the proxy's
if ARGV[1] ~= '-1' then                               -- (the proxies' usual "-1" needs no strtod)
  now = tonumber(ARGV[1])
  if not now then peek, now = true, tonumber(sub(ARGV[1], 6)) end
end
if now < 0 then
  local tm = call('TIME')
  now = tm[1] * 1000 + floor(tm[2] / 1000)
end
local n = #KEYS
local spec, RULE, RULE_LEN = ARGV[2], '>BI7I7I7I7I7I7', 43   -- rule i from byte RULE_LEN * (i - 1) + 1
local ONE, TWO = '>i7BBi7i7i7', '>i7BBi7i7i7Bi7i7i7'  -- the answer for one rule, for two, for three
local THREE = '>i7BBi7i7i7Bi7i7i7Bi7i7i7'

local K = 8                                           -- entries known in a sliding log's tail
local TAIL1 = '>BI7I7I7I7BI7I7I7I7I7I7I7I7'           -- unweighted: 1, t, w, count, dead, j, l1..l8
local HEAD1 = '>BI7I7I7I7B'                           -- its first 30 bytes
local HEAD1T = '>BI7I7I7I7BI7'                        -- and l1
local TAIL1_LEN = 30 + 7 * K
local TAIL3_LEN = TAIL1_LEN + 7                       -- of unit u: the same, then u
local HEAD2 = '>BI7I7I7I7I7I7B'                       -- weighted: 2, t, cum, w, count, dead, base, j
local HEAD2R = '>xI7I7I7I7I7I7B'                      -- the same, read
local TAIL2_LEN = 44 + 14 * K                         -- then l1..l8 from byte 45, c1..c8 from 101
local LIST = '>I7I7I7I7I7I7I7I7'
local M = 4503599627370496                            -- 2^52: running totals are kept mod M
local TRIM = 32                                       -- dead entries worth an LTRIM
-- A quota's key lives this long past its period's end (read as 0 units then): a check in
-- the period's last ms on an explicit clock (the unit tests) must still find it.
local QUOTA_GRACE = 60000

local fmt = string.format   -- '%d' keeps integers exact (a number argument may become "1e+9")

-- The common checks, inline (a function made costs every call): sliding-log rules whose
-- tails, or the K entries after their known ones, know enough, alone or with quotas and
-- one concurrency rule only beside them; a log of one unit and a request of that cost
-- (unit 1: the same code as before costs), or a weighted log. The same steps as sl_decide
-- and sl_record below (and the verdict of a rejected request in the check), which do the
-- rest (and all of it for other rules, when a quota's period starts, or when a quota or
-- one of several logs would reject).
-- si, ci: the first sliding-log rule, a concurrency rule; m1: a log's last entry; more: the
-- other logs' rules, when there are several, and mt their last entries.
local si, ci, m1, more, mt
if not peek then
  for i = 1, n do
    local g = byte(spec, RULE_LEN * i - RULE_LEN + 1)
    if g == 0 then
      if not si then si = i elseif more then more[#more + 1] = i else more = {i} end
    elseif g == 4 and not ci then ci = i
    elseif g ~= 5 then si = nil break end
  end
end

if si then
  -- What an admitted request writes to log li (an LTRIM to, the tail, the TTL) and answers;
  -- what the log answers when another rule refuses (nothing recorded). With several logs,
  -- those decided before li wait in done; their last entries, for the full check, in mt.
  local li = si
  local rate, burst, w, cost = unpack('>xI7I7I7I7', spec, RULE_LEN * li - RULE_LEN + 1)
  local k, c = KEYS[li], rate + burst
  local trim, tail, expire, rem, reset, nrem, nreset
  local done, nd
  if more then done, nd, mt = {}, 0, {} end
  repeat
    m1 = rpcall('LINDEX', k, '-1')
    if mt then mt[li] = m1 end
    local ln = m1 and #m1                               -- (a reply of another type is a table: 0)
    local g1 = (ln == TAIL1_LEN or ln == TAIL3_LEN) and byte(m1, 1)   -- the tail's layout
    if g1 == 1 and ln == TAIL1_LEN and cost == 1 or g1 == 3 and ln == TAIL3_LEN and cost == unpack('>I7', m1, 87) then
      local tn, wn, cnt, dead, j = unpack('>xI7I7I7I7B', m1)
      local cu = c                                      -- the entries that fit: floor(C / unit)
      if cost > 1 then cu = (c - c % cost) / cost end
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
          if count < cu then
            dead = dead + e
            expire = tn - tn % w ~= t - t % w           -- a new w-aligned period
            if dead >= TRIM then                        -- (when it empties the list, the key goes)
              trim, dead, expire = dead, 0, expire or count == 0
            end
            if r then
              local d, jn = {0, 0, 0, 0, 0, 0, 0, 0}, 0 -- newest first, K of them (made whole: a table that grows rehashes)
              if count == nk and nk < K then d[1], jn = t, 1 end
              for x = #r, rx + 1, -1 do
                jn = jn + 1
                d[jn] = unpack('>xI7', r[x])
              end
              tail = pack(TAIL1, g1, t, w, count + 1, dead, jn, tunpack(d))
              if g1 == 3 then tail = tail .. sub(m1, 87, 93) end
            elseif count == nk and nk < K then            -- (the times move, not unpacked)
              if g1 == 1 then tail = pack(HEAD1T, 1, t, w, count + 1, dead, nk + 1, t) .. sub(m1, 31, 79)
              else tail = pack(HEAD1T, 3, t, w, count + 1, dead, nk + 1, t) .. sub(m1, 31, 79) .. sub(m1, 87, 93) end
            else
              tail = pack(HEAD1, g1, t, w, count + 1, dead, nk) .. sub(m1, 31, #m1)
            end
            nrem, nreset = c - count * cost, 0
            if count == 0 then o = t else nreset = o + w - t end
            rem, reset = c - (count + 1) * cost, o + w - t
          elseif n == 1 and count - cu < nk then        -- rejected: wait for the (count - cu + 1)th oldest
            if r then o = unpack('>xI7', r[rx + count - cu + 1])
            else o = unpack('>I7', m1, 24 + 7 * (nk - count + cu)) end
            return pack(ONE, now, 0, 0, c, 0, o + w - t)
          end
        end
      end
    elseif ln == TAIL2_LEN and byte(m1, 1) == 2 then
      local tn, cn, wn, cnt, dead, base, j = unpack(HEAD2R, m1)
      if wn == w and j <= K and j <= cnt then
        local t = now
        if tn > t then t = tn end
        local lo = t - w
        local e, p, o = 0, 38 + 7 * j, t                -- l_j, the oldest known, at byte 45 + 7(j-1); c_j 56 on
        while e < j do
          o = unpack('>I7', m1, p)
          if o > lo then break end
          base = unpack('>I7', m1, p + 56)              -- it left the log
          e = e + 1
          p = p - 7
        end
        local count, nk, r, rx = cnt - e, j - e, nil, 0
        if e == j and e < cnt then                      -- all known ones left: the next K
          r = call('LRANGE', k, dead + e, dead + e + K - 1)
          nk = -1                                       -- unless one of them is in the window
          for x = 1, #r do
            local ot, oc = unpack('>xI7I7', r[x])
            if ot > lo then
              o, rx, e = ot, x - 1, e + x - 1
              count, nk = cnt - e, #r - rx
              break
            end
            base = oc
          end
        end
        if nk >= 0 then
          local used = (cn - base) % M
          if used + cost <= c and count > 0 and (used ~= count or cost ~= 1) then   -- (else one unit: below)
            dead = dead + e
            expire = tn - tn % w ~= t - t % w
            if dead >= TRIM then
              trim, dead, expire = dead, 0, expire or count == 0
            end
            local cnew = (cn + cost) % M
            if r then
              local ts, cs, jn = {0, 0, 0, 0, 0, 0, 0, 0}, {0, 0, 0, 0, 0, 0, 0, 0}, 0   -- newest first, K of them
              if count == nk and nk < K then ts[1], cs[1], jn = t, cnew, 1 end
              for x = #r, rx + 1, -1 do
                jn = jn + 1
                ts[jn], cs[jn] = unpack('>xI7I7', r[x])
              end
              tail = pack(HEAD2, 2, t, cnew, w, count + 1, dead, base, jn) .. pack(LIST, tunpack(ts)) ..
                     pack(LIST, tunpack(cs))
            elseif count == nk and nk < K then
              tail = pack(HEAD2, 2, t, cnew, w, count + 1, dead, base, nk + 1) .. pack('>I7', t) .. sub(m1, 45, 93) ..
                     pack('>I7', cnew) .. sub(m1, 101, 149)
            else
              tail = pack(HEAD2, 2, t, cnew, w, count + 1, dead, base, nk) .. sub(m1, 45, TAIL2_LEN)
            end
            nrem, nreset = c - used, 0
            if count == 0 then o = t else nreset = o + w - t end
            rem, reset = c - used - cost, o + w - t
          elseif n == 1 and used + cost > c then        -- rejected: wait for the oldest entry reaching it
            local need = used + cost - c
            if r then
              for x = rx + 1, #r do
                local ot, oc = unpack('>xI7I7', r[x])
                if (oc - base) % M >= need then return pack(ONE, now, 0, 0, c, 0, ot + w - t) end
              end
            else
              p = 38 + 7 * nk
              for x = 1, nk do                          -- l_nk (the oldest) .. l_1
                if (unpack('>I7', m1, p + 56) - base) % M >= need then
                  return pack(ONE, now, 0, 0, c, 0, unpack('>I7', m1, p) + w - t)
                end
                p = p - 7
              end
            end
          end
        end
      end
    end
    if not more or not tail or nd == #more then break end
    nd = nd + 1                                         -- the next log
    done[nd] = {li, k, trim, tail, expire, w, c, rem, reset}
    li = more[nd]
    rate, burst, w, cost = unpack('>xI7I7I7I7', spec, RULE_LEN * li - RULE_LEN + 1)
    k, c = KEYS[li], rate + burst
    trim, tail, expire = nil, nil, nil
  until false
  -- The verdicts of the other rules: with more than two rules in out, else of the one in
  -- ol, orem, oreset (with two logs: the first's).
  local out, ol, orem, oreset
  if tail and n == 3 then out = {now, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}   -- (a table that grows rehashes)
  elseif tail and n > 3 then
    out = {now, 1}
    for x = 3, 4 * n + 2 do out[x] = 0 end
  end
  local cw, nows                                      -- the concurrency rule's lease TTL once it allows; now as text
  if tail and ci then
    -- The leases live now (ZCOUNT), as the full check counts them. A refusal by them with no
    -- quota beside is answered here (nothing recorded); beside quotas, by the full check.
    local co = RULE_LEN * ci - RULE_LEN + 1
    local cr, cb, cttl, _, held = unpack('>xI7I7I7I7I7', spec, co)
    local cn = cr + cb
    nows = fmt('%d', now)
    local live = rpcall('ZCOUNT', KEYS[ci], '(' .. nows, '+inf')
    -- fewer than the proxy holds: the set lost them (flushed, restarted empty); count the proxy's
    if type(live) == 'number' and live < held then live, lost = held, 2 end
    if type(live) ~= 'number' then
      tail = nil                                      -- not a set of ours: the full check replaces it
    elseif live >= cn then
      if n == 2 and si == 1 then return pack(TWO, now, lost, 1, c, nrem, nreset, 0, cn, 0, 1000) end
      if n == 2 then return pack(TWO, now, lost, 0, cn, 0, 1000, 1, c, nrem, nreset) end
      tail = nil
    else
      cw = cttl
      if out then out[4 * ci - 1], out[4 * ci], out[4 * ci + 1], out[4 * ci + 2] = 1, cn, cn - live - 1, 0
      else ol, orem, oreset = cn, cn - live - 1, 0 end
    end
  end
  if tail and n > 1 then
    -- The quotas beside the log, in the period the proxy named (from, to: its clock's), when
    -- it holds now: one HINCRBY of the period's field each, whose answer decides. Undone
    -- (and the check made in full below) when a field was new (its period starts: written
    -- whole there), a quota would go over (decided there) or the period is not now's.
    for i = 1, n do
      local o = RULE_LEN * i - RULE_LEN + 1
      if i ~= si and i ~= ci and (not more or byte(spec, o) == 5) then
        local _, qr, qb, _, qc, from, to = unpack(RULE, spec, o)
        local inc = qc == 1 and '1' or fmt('%d', qc)    -- (a number argument is formatted as %.17g: slower)
        local used = from <= now and now < to and rpcall('HINCRBY', KEYS[i], sub(spec, o + 29, o + 42), inc)
        if type(used) ~= 'number' or used == qc or used > qr + qb then
          if used == qc then call('HDEL', KEYS[i], sub(spec, o + 29, o + 42))
          elseif type(used) == 'number' then call('HINCRBY', KEYS[i], sub(spec, o + 29, o + 42), -qc) end
          for x = 1, i - 1 do                         -- (rare) the quotas taken before it: fields not new
            local ox = RULE_LEN * x - RULE_LEN + 1
            if byte(spec, ox) == 5 then
              call('HINCRBY', KEYS[x], sub(spec, ox + 29, ox + 42), -unpack('>I7', spec, ox + 22))
            end
          end
          tail = nil
          break
        end
        if out then out[4 * i - 1], out[4 * i], out[4 * i + 1], out[4 * i + 2] = 1, qr + qb, qr + qb - used, to - now
        else ol, orem, oreset = qr + qb, qr + qb - used, to - now end
      end
    end
  end
  if tail then
    if done then                                      -- the logs before li
      for y = 1, #done do
        local d = done[y]
        if d[3] then call('LTRIM', d[2], d[3], -1) end
        call('RPUSH', d[2], d[4])
        if d[5] then call('PEXPIRE', d[2], 2 * d[6]) end
        if n == 2 then ol, orem, oreset = d[7], d[8], d[9]   -- (rule 1: logs come in order)
        else
          local z = 4 * d[1]
          out[z - 1], out[z], out[z + 1], out[z + 2] = 1, d[7], d[8], d[9]
        end
      end
    end
    if trim then call('LTRIM', k, trim, -1) end
    call('RPUSH', k, tail)
    if expire then call('PEXPIRE', k, 2 * w) end
    if cw then                                        -- the lease, as the full check records it
      local ck = KEYS[ci]
      call('ZADD', ck, fmt('%d', now + cw), ARGV[3])
      local pt = call('PTTL', ck)
      if pt < cw then
        if pt >= 0 then call('ZREMRANGEBYSCORE', ck, '-inf', nows) end
        call('PEXPIRE', ck, fmt('%d', 2 * cw))
      end
    end
    if n == 1 then return pack(ONE, now, 1, 1, c, rem, reset) end
    if n == 2 and li == 1 then return pack(TWO, now, 1 + lost, 1, c, rem, reset, 1, ol, orem, oreset) end
    if n == 2 then return pack(TWO, now, 1 + lost, 1, ol, orem, oreset, 1, c, rem, reset) end
    local z = 4 * li
    out[z - 1], out[z], out[z + 1], out[z + 2] = 1, c, rem, reset
    out[2] = 1 + lost
    if n == 3 then return pack(THREE, tunpack(out)) end
    return pack('>i7B' .. string.rep('Bi7i7i7', n), tunpack(out))
  end
end

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
