-- check.lua: one atomic check of every rule (rate, quota and concurrency) of one subject
-- (store/redis/limiter_redis.c). One script in two files: this one (the arguments, the layouts,
-- and the common checks answered inline) and check_general.lua (every other check), which
-- store/redis/embed_lua.py appends to it.
-- The same arithmetic as store/memory/algorithms.c (see the meaning of the numbers there); change
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
--   unknowable). store/redis/renew.lua keeps held leases alive.

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
