"""SPEC "Beyond per-window rates": on_store_error = local (the default, and for
concurrency_on_store_error too). While Redis is unreachable each proxy enforces every limit
in its own memory (limit x local_share, at least 1), with RateLimit headers from that local
state and decision "local" in the access log; no request waits on the dead store; when
Redis is back, enforcement is on it again within 1 s; a lease released while Redis was away
does not keep counting there when it returns."""
import subprocess
import threading
import time

import pytest

from conftest import (TIERPROXY_BIN, _clean_env, assert_json_error, ietf_policy, ietf_state, wait_until,
                      write_ini)

# Generous: "no request waits on the dead store"; a request must not take a store timeout
# each (the worker's command timeout is 0.5 s), so 30 requests stay well under this.
THIRTY_REQUESTS_MAX_S = 10.0


def store_is_ok(p):
    # /health is 200 while the store is away too (decided locally): its store member says
    r = p.admin("/health")
    return r.status == 200 and r.json().get("store") == "ok"


def ten_per_minute_user(catalog, name="ten"):
    # a rate and a concurrency limit, so both on_store_error settings are met
    catalog.plan(name, "--rate", "10/min", "--concurrency", "5")
    return catalog.user_key(name)[1]


def statuses(p, key, n, path="/during-outage"):
    rs = [p.get(path, key=key, timeout=30) for _ in range(n)]
    return rs


@pytest.mark.parametrize("outage", ["killed", "frozen"])
def test_redis_down_defaults_enforce_locally_per_proxy(catalog, proxies, redis_factory, outage):
    """The defaults, two proxies on one Redis: with Redis down, each proxy admits exactly
    10 of a 10/min user's requests (local_share = 1), answers the rest 429 (never 503),
    with RateLimit headers, and logs decision "local"."""
    key = ten_per_minute_user(catalog)
    rd = redis_factory()
    a = proxies.start(catalog, store="redis", redis=rd, key_prefix="lf%d:" % rd.port)
    b = proxies.start(catalog, store="redis", redis=rd, key_prefix="lf%d:" % rd.port)
    r = a.get("/before", key=key)
    assert r.status == 200 and r.header("RateLimit") is not None, r
    if outage == "killed":
        rd.stop()
    else:
        rd.pause()
        # the first check on the hung connection is cut by the command timeout, then local
    t0 = time.monotonic()
    ra = statuses(a, key, 15)
    rb = statuses(b, key, 15)
    took = time.monotonic() - t0
    for r in ra + rb:
        assert r.status in (200, 429), r
        if r.status == 429:
            assert_json_error(r, 429)
            assert r.header("Retry-After") is not None, r
    admitted_a = [r for r in ra if r.status == 200]
    admitted_b = [r for r in rb if r.status == 200]
    assert len(admitted_a) == 10, [r.status for r in ra]
    assert len(admitted_b) == 10, [r.status for r in rb]
    # RateLimit headers from the local state: the rate (10) and the concurrency limit (5)
    for r in admitted_a + admitted_b:
        assert sorted(ietf_policy(r).values()) == [5, 10], r
    assert min(item["r"] for item in ietf_state(ra[-1]).values()) == 0, ra[-1]
    assert took < THIRTY_REQUESTS_MAX_S, "30 requests took %.1fs with the store down" % took
    logged = [ln for ln in a.access_log_lines() if ln.get("path") == "/during-outage"]
    assert logged and all(ln["decision"] == "local" for ln in logged), \
        sorted({ln["decision"] for ln in logged})
    if outage == "frozen":
        rd.resume()


@pytest.mark.parametrize("outage", ["killed", "frozen"])
def test_enforcement_back_on_redis_within_a_second(catalog, proxies, redis_factory, outage):
    """Redis killed and restarted (empty) on its port, or frozen and thawed: one second
    after it answers again, counts are fleet-wide again. Killed: the user of the outage gets
    exactly 10 of 12 requests spread over both proxies (local counting would admit none:
    each proxy's local count is used up). Both: a user new after the return gets exactly 10
    of 12 (local counting would admit all 12: 6 per proxy)."""
    key = ten_per_minute_user(catalog)
    _, fresh_key = catalog.user_key("ten")
    rd = redis_factory()
    a = proxies.start(catalog, store="redis", redis=rd, key_prefix="lb%d:" % rd.port)
    b = proxies.start(catalog, store="redis", redis=rd, key_prefix="lb%d:" % rd.port)
    for p in (a, b):
        assert wait_until(lambda: store_is_ok(p), 10)
    assert a.get("/before", key=key).status == 200
    if outage == "killed":
        rd.stop()
    else:
        rd.pause()
    for p in (a, b):
        rs = statuses(p, key, 11)
        assert [r.status for r in rs].count(200) == 10, [r.status for r in rs]
    if outage == "killed":
        redis_factory(port=rd.port)   # returns once it answers PING
    else:
        rd.resume()
        assert rd.cmd("PING") == "PONG"
    time.sleep(1.0)

    def spread(k):
        return [(a if i % 2 == 0 else b).get("/after", key=k).status for i in range(12)]
    users = [key, fresh_key] if outage == "killed" else [fresh_key]
    for k in users:
        got = spread(k)
        assert all(s in (200, 429) for s in got), got
        assert got.count(200) == 10, got
    logged = [ln for ln in a.access_log_lines() + b.access_log_lines() if ln.get("path") == "/after"]
    assert all(ln["decision"] in ("allowed", "rejected") for ln in logged), \
        sorted({ln["decision"] for ln in logged})


def test_lease_released_during_outage_does_not_count_after(catalog, proxies, redis_factory):
    """A concurrency-1 user's request holds its slot in Redis when Redis stops answering
    (frozen: its data stays); the request ends during the outage. When Redis is back, the
    user's next request is admitted: the slot given back while Redis was away does not
    keep counting there until its TTL (30 s)."""
    catalog.plan("one", "--rate", "1000/min", "--concurrency", "1")
    key = catalog.user_key("one")[1]
    catalog.plan("probe", "--rate", "1000/min")
    probe_key = catalog.user_key("probe")[1]
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, key_prefix="ll%d:" % rd.port,
                      proxy={"workers": 1})
    # on Redis from the start (a loaded machine may take a while to connect)
    assert wait_until(lambda: store_is_ok(p), 10)
    assert p.get("/warm", key=key).status == 200
    held = {}

    def slow():
        held["r"] = p.get("/slow/2500", key=key, timeout=30)
    t = threading.Thread(target=slow)
    t.start()
    # the slot is taken in Redis (the upstream has the request)
    assert wait_until(lambda: rd.cmd("KEYS", "ll%d:*" % rd.port) and
                      any(rd.cmd("ZCARD", k) for k in rd.cmd("KEYS", "ll%d:*" % rd.port)
                          if rd.cmd("TYPE", k) == "zset"), 10), "the slot is not in Redis"
    rd.pause()
    # a request on the hung connection finds it dead (the command timeout); from then on
    # the store is down for this proxy
    p.get("/probe", key=probe_key, timeout=30)
    assert wait_until(lambda: not store_is_ok(p), 5), "the proxy never saw Redis go"
    t.join(30)
    assert held["r"].status == 200, held["r"]   # ended, and gave its slot back, during the outage
    rd.resume()
    assert wait_until(lambda: store_is_ok(p), 5), "the proxy never saw Redis back"
    time.sleep(1.0)
    r = p.get("/after", key=key)
    assert r.status == 200, r
    # the log line is written just after the answer
    logged = wait_until(lambda: [ln for ln in p.access_log_lines() if ln.get("path") == "/after"], 5)
    assert logged and logged[-1]["decision"] == "allowed", logged


def test_check_cut_by_the_timeout_leaves_no_slot_in_redis(catalog, proxies, redis_factory):
    """Concurrency 1, Redis frozen: the request whose check meets the hung connection waits
    the command timeout, is then decided locally (200) and ends during the outage. Redis,
    thawed, runs the check it had read and records its slot; the proxy takes it back when it
    is on Redis again, so the user's next request is admitted (not refused for 30 s)."""
    catalog.plan("one", "--rate", "1000/min", "--concurrency", "1")
    key = catalog.user_key("one")[1]
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, proxy={"workers": 1})
    assert wait_until(lambda: store_is_ok(p), 10)
    assert p.get("/warm", key=key).status == 200
    rd.pause()
    r = p.get("/slow/300", key=key, timeout=30)   # its check is cut at 500 ms, then local
    assert r.status == 200, r
    logged = wait_until(lambda: [ln for ln in p.access_log_lines() if ln.get("path") == "/slow/300"], 5)
    assert logged and logged[-1]["decision"] == "local", logged
    rd.resume()
    assert wait_until(lambda: store_is_ok(p), 5), "the proxy never saw Redis back"
    time.sleep(1.0)
    r = p.get("/after", key=key)
    assert r.status == 200, r
    logged = wait_until(lambda: [ln for ln in p.access_log_lines() if ln.get("path") == "/after"], 5)
    assert logged and logged[-1]["decision"] == "allowed", logged


def test_local_slots_while_redis_is_down(catalog, proxies, redis_factory):
    """Concurrency 1, Redis killed: a slot taken in Redis before the outage still counts
    locally while its request runs (a second request is refused 429); a slot taken locally
    is given back locally when its request ends (the next request is admitted)."""
    catalog.plan("one", "--rate", "1000/min", "--concurrency", "1")
    key = catalog.user_key("one")[1]
    up_key = key
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, proxy={"workers": 1})
    assert p.get("/warm", key=key).status == 200
    got = {}

    def slow(name, ms):
        got[name] = p.get("/slow/%d" % ms, key=up_key, timeout=30)
    before = threading.Thread(target=slow, args=("before", 1500))
    before.start()
    time.sleep(0.4)   # its slot is held in Redis
    rd.stop()
    r = p.get("/during", key=key)
    assert r.status == 429, r   # the Redis-held slot counts in the local decision
    assert r.json()["error_code"] == "concurrency_limit_exceeded", r
    before.join(30)
    assert got["before"].status == 200, got["before"]
    # a local slot: taken, refused to a second request, given back at the end
    local = threading.Thread(target=slow, args=("local", 800))
    local.start()
    time.sleep(0.3)
    r = p.get("/during", key=key)
    assert r.status == 429, r
    local.join(30)
    assert got["local"].status == 200, got["local"]
    r = p.get("/during", key=key)
    assert r.status == 200 and ietf_policy(r) and set(ietf_policy(r).values()) <= {1, 1000}, r
    logged = [ln for ln in p.access_log_lines() if ln.get("path") in ("/during", "/slow/800")]
    assert logged and all(ln["decision"] == "local" for ln in logged), logged


def test_local_share_scales_each_limit(catalog, proxies, redis_factory):
    """local_share = 0.3: a 10/min user gets 3 per proxy while Redis is down; a
    concurrency-1 limit stays at least 1."""
    catalog.plan("share", "--rate", "10/min", "--concurrency", "1")
    key = catalog.user_key("share")[1]
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, limits={"local_share": "0.3"})
    assert p.get("/before", key=key).status == 200
    rd.stop()
    rs = statuses(p, key, 6)
    got = [r.status for r in rs]
    assert got == [200, 200, 200, 429, 429, 429], got
    assert sorted(ietf_policy(rs[0]).values()) == [1, 3], rs[0]


def check_with(proxies, catalog, tmp_path, section, key, value):
    """tierproxy --check on a file setting [section] key = value: (exit code, output, the
    file, the key's line)."""
    ini = proxies.config(catalog, store="memory")
    ini[section][key] = value
    path = tmp_path / ("check-%s.ini" % key)
    write_ini(path, ini)
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(path), "--check"], capture_output=True, text=True,
                        timeout=60, env=_clean_env(), stdin=subprocess.DEVNULL)
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1) if ln.startswith(key + " ="))
    return cp.returncode, cp.stdout + cp.stderr, path, line


@pytest.mark.parametrize("value", ["0", "1.5", "-0.1", "abc", "", "nan", "inf", "0.5x", "1e400"])
def test_bad_local_share_names_file_line_key(proxies, catalog, tmp_path, value):
    rc, out, path, line = check_with(proxies, catalog, tmp_path, "limits", "local_share", value)
    assert rc == 1, out
    assert "%s:%d" % (path, line) in out and "local_share" in out, out


@pytest.mark.parametrize("key,value", [("on_store_error", "local"), ("concurrency_on_store_error", "local"),
                                       ("on_store_error", "open"), ("concurrency_on_store_error", "closed"),
                                       ("local_share", "1.0"), ("local_share", "0.25"), ("local_share", "1")])
def test_local_values_accepted(proxies, catalog, tmp_path, key, value):
    rc, out, _, _ = check_with(proxies, catalog, tmp_path, "limits", key, value)
    assert rc == 0, out


def test_bad_store_error_mode_names_the_three_words(proxies, catalog, tmp_path):
    rc, out, path, line = check_with(proxies, catalog, tmp_path, "limits", "on_store_error", "maybe")
    assert rc == 1 and "%s:%d" % (path, line) in out, out
    assert "local" in out, out


def test_redis_up_one_evalsha_per_request_with_local_default(catalog, proxies, redis_factory):
    """The fallback costs Redis nothing while it answers: with the defaults (local), each
    request of a plan with a rate and a concurrency limit is one EVALSHA."""
    from test_redis_usage import evalsha_calls
    catalog.plan("wide", "--rate", "100000/min", "--concurrency", "50")
    wide_key = catalog.user_key("wide")[1]
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd)
    assert p.get("/warm", key=wide_key).status == 200
    before = evalsha_calls(rd)
    c = p.client()
    for _ in range(200):
        r = c.get("/hot", key=wide_key)
        assert r.status == 200 and r.header("RateLimit") is not None, r
    c.close()
    assert evalsha_calls(rd) - before == 200
    assert all(ln["decision"] == "allowed" for ln in p.access_log_lines() if ln.get("path") == "/hot")
