-- renew.lua: every concurrency lease one limiter holds, in one call (store/redis/limiter_redis.c):
-- renewed every lease_ttl_ms / 3, or given back all at once (limiter_release_all).
--
-- KEYS[i]   a concurrency key "<prefix>{<subject>}:<rule id>" (sorted set: member = lease
--           id, score = its expiry in ms; see check.lua)
-- ARGV[1]   "renew" or "release"
-- ARGV[2]   now in Unix ms, or negative: the server clock (TIME); unused by "release"
-- then, for each key i in order: ttl_ms, m, and m lease ids
--
-- A Redis Cluster node (store/cluster/limiter_cluster.c) refuses declared KEYS of several slots
-- (CROSSSLOT), even on one node, but lets a script touch undeclared keys of any slot it
-- serves. There the call declares no KEYS: ARGV[3] is the number of keys and each key's
-- name comes before its ttl_ms. A key the node does not serve (moved by a reshard) fails
-- its own ZADD/ZREM (pcall) and the walk goes on with the next.
--
-- renew:   ZADD every lease with score now + ttl (so a lease lost with a Redis that
--          restarted empty is there again) and makes sure the key lives at least ttl.
-- release: ZREM every lease.
-- Returns the number of keys walked. A key of another type is skipped. A renewal whose
-- ZADD Redis refused for want of memory or of writes (OOM, READONLY, MISCONF) answers that
-- error: its leases may be missing, and the proxy renews again before its next check.

local fmt, sub = string.format, string.sub
local call, rpcall = redis.call, redis.pcall
local unpack = unpack or table.unpack

local release = ARGV[1] == 'release'
local now = tonumber(ARGV[2])
if not release and now < 0 then
  local tm = call('TIME')
  now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
end

local CHUNK = 128   -- members per ZADD/ZREM: unpack() has a stack limit
local failed        -- the first error of a ZADD, if any
local keyed = #KEYS > 0
local nkeys, pos = #KEYS, 3
if not keyed then nkeys, pos = tonumber(ARGV[3]), 4 end
for i = 1, nkeys do
  local k
  if keyed then k = KEYS[i] else k = ARGV[pos]; pos = pos + 1 end
  local ttl, m = tonumber(ARGV[pos]), tonumber(ARGV[pos + 1])
  pos = pos + 2
  local score = fmt('%d', now + ttl)
  local bad = false
  local j = 0
  while j < m and not bad do
    local args = {}
    local last = j + CHUNK
    if last > m then last = m end
    for x = j, last - 1 do
      if release then
        args[#args + 1] = ARGV[pos + x]
      else
        args[#args + 1] = score
        args[#args + 1] = ARGV[pos + x]
      end
    end
    local r
    if release then r = rpcall('ZREM', k, unpack(args)) else r = rpcall('ZADD', k, unpack(args)) end
    if type(r) == 'table' and r.err then
      bad = true
      local e = r.err
      if sub(e, 1, 3) == 'OOM' or sub(e, 1, 8) == 'READONLY' or sub(e, 1, 7) == 'MISCONF' then failed = failed or e end
    end
    j = last
  end
  pos = pos + m
  if not release and not bad and call('PTTL', k) < ttl then call('PEXPIRE', k, fmt('%d', ttl)) end
end
-- a lease left out (OOM, say) is told, so the proxy renews again rather than count on it
if failed and not release then return redis.error_reply(failed) end
return nkeys
