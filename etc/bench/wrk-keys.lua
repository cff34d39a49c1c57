-- wrk script for etc/bench.sh: every request carries "Authorization: Bearer KEY", KEY
-- rotating over the API keys in $WRK_KEYFILE (one per line). Requests are formatted once in
-- init(), so the per-request Lua cost in wrk is one table index. done() prints one
-- machine-readable RESULT line that etc/bench.sh parses.
local reqs = {}
local n = 0
local i = 0

function init(args)
    local path = os.getenv("WRK_KEYFILE")
    assert(path and path ~= "", "WRK_KEYFILE not set")
    for line in io.lines(path) do
        if line ~= "" then
            n = n + 1
            reqs[n] = wrk.format("GET", "/", { ["Authorization"] = "Bearer " .. line,
                                               ["Host"] = wrk.headers["Host"] })
        end
    end
    assert(n > 0, "no keys in " .. path)
end

function request()
    i = i % n + 1
    return reqs[i]
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format(
        "RESULT requests=%d duration_us=%d bytes=%d err_connect=%d err_read=%d err_write=%d " ..
        "err_status=%d err_timeout=%d lat_mean_us=%.1f lat_p50_us=%d lat_p90_us=%d lat_p99_us=%d lat_max_us=%d\n",
        summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write,
        e.status, e.timeout, latency.mean, latency:percentile(50), latency:percentile(90),
        latency:percentile(99), latency.max))
end
