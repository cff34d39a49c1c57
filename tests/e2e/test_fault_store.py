"""SPEC "Faults keep their promises", the store's side: local mode counts per proxy, not
per worker, and the leases a proxy held in Redis when it went away count against its local
limit; leases taken locally are registered in Redis when it is back, before it decides
again; a Redis that lost the leases of running requests (FLUSHALL) gets them back; a store
that answers with an error (wrong password, OOM) is a store error that is named on stderr
and in /health, and `--check` fails on a wrong password; the memory store's eviction never
forgets a keyed user's quota count, and evicts anonymous subjects first.

The upstream (ws_upstream.py) counts what is open per user itself, so "never more than N at
once" is judged where it matters."""
import json
import re
import socket
import subprocess
import time

import pytest

from conftest import SLOW, TIERPROXY_BIN, _clean_env, log_lines, wait_until, write_ini
from fleet_helpers import (HandshakeRefused, check_concurrency_429, http_send, parallel_requests,
                           wait_stat, ws_connect, ws_upstream)  # noqa: F401


def conc_plan(catalog, n, name="conc"):
    catalog.plan(name, "--rate", "100000/min", "--concurrency", str(n))
    return catalog.user_key(name)


def hold(port, key, target="/hang"):
    """A request sent on a fresh socket, its answer never read: it holds a slot until closed."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    http_send(s, "GET", target, key=key)
    return s


def statuses(rs):
    return sorted(r.status if r is not None else None for r in rs)


def max_open(up, user):
    return up.stats()["max_open"].get(user, 0)


def redis_proxy(proxies, catalog, rd, up, workers=2, prefix=None, **kw):
    limits = kw.pop("limits", {})
    return proxies.start(catalog, upstream=up, store="redis", redis=rd, key_prefix=prefix or "fs%d:" % rd.port,
                         proxy={"workers": workers}, limits=limits, **kw)


# --------------------------------------------------------------------------------------
# local mode counts per proxy


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_outage_counts_per_proxy_with_the_leases_held_in_redis(catalog, proxies, redis_factory, ws_upstream,
                                                               workers):
    """Concurrency 4, four requests running (admitted by Redis, spread over the workers),
    then Redis is killed: the four fill the proxy's local limit, so six more at once are all
    refused; two of the four end, and then exactly two more are admitted. Counting per
    worker (each worker its own leases) admitted 6 and 7 in flight."""
    user, key = conc_plan(catalog, 4)
    rd = redis_factory()
    p = redis_proxy(proxies, catalog, rd, ws_upstream, workers=workers)
    held = [hold(p.port, key) for _ in range(4)]
    try:
        assert wait_stat(ws_upstream, "open", user, 4) == 4, "the four running requests never arrived"
        rd.stop()
        rs = parallel_requests([(p.port, "GET", "/slow/1500", key)] * 6)
        assert statuses(rs) == [429] * 6, "admitted past 4 with 4 running, Redis down: %s" % statuses(rs)
        for r in rs:
            check_concurrency_429(r)
        for s in held[:2]:
            s.close()
        assert wait_stat(ws_upstream, "open", user, 2) == 2
        time.sleep(0.1 * SLOW)   # the two slots are given back when the proxy sees the close
        rs = parallel_requests([(p.port, "GET", "/slow/1000", key)] * 5)
        assert statuses(rs) == [200, 200, 429, 429, 429], statuses(rs)
        assert max_open(ws_upstream, user) == 4, ws_upstream.stats()["max_open"]
    finally:
        for s in held:
            s.close()


# --------------------------------------------------------------------------------------
# the return: leases taken locally are registered in Redis


def end_outage(rd, redis_factory, outage):
    if outage == "killed":
        return redis_factory(port=rd.port)   # restarted empty; returns once it answers PING
    rd.resume()
    return rd


def begin_outage(rd, outage):
    if outage == "killed":
        rd.stop()
    else:
        rd.pause()


@pytest.mark.parametrize("outage", ["killed", "frozen"])
def test_leases_taken_during_an_outage_count_in_redis_after_it(catalog, proxies, redis_factory, ws_upstream,
                                                               outage):
    """Concurrency 2, two proxies. Redis away, proxy A admits two requests locally. Redis
    back (restarted empty, or thawed), enforcement is back on it within a second: the two
    still running are counted there, so no further request is admitted by either proxy
    (before, Redis knew nothing of them: 4 in flight)."""
    user, key = conc_plan(catalog, 2)
    rd = redis_factory()
    a = redis_proxy(proxies, catalog, rd, ws_upstream)
    b = redis_proxy(proxies, catalog, rd, ws_upstream)
    begin_outage(rd, outage)
    held = []
    try:
        held = [hold(a.port, key) for _ in range(2)]
        assert wait_stat(ws_upstream, "open", user, 2, timeout=5 * SLOW) == 2, "not admitted during the outage"
        rd = end_outage(rd, redis_factory, outage)
        time.sleep(1.2)
        rs = parallel_requests([(b.port, "GET", "/slow/300", key)] * 2 + [(a.port, "GET", "/slow/300", key)] * 2)
        assert statuses(rs) == [429] * 4, \
            "after the return (%s), admitted past 2 with 2 running that were admitted locally: %s" % \
            (outage, statuses(rs))
        assert max_open(ws_upstream, user) == 2, ws_upstream.stats()["max_open"]
    finally:
        for s in held:
            s.close()
        if outage == "frozen":
            rd.resume()


def test_websocket_opened_during_an_outage_counts_after_it(catalog, proxies, redis_factory, ws_upstream):
    """Concurrency 1: a tunnel opened through proxy A while Redis is away holds the user's
    one slot after Redis is back, so a second tunnel through proxy B is refused (before,
    both stayed open, up to the idle timeout of an hour)."""
    user, key = conc_plan(catalog, 1)
    rd = redis_factory()
    a = redis_proxy(proxies, catalog, rd, ws_upstream)
    b = redis_proxy(proxies, catalog, rd, ws_upstream)
    rd.stop()
    ws = ws_connect(a.port, key=key)
    try:
        rd = redis_factory(port=rd.port)
        time.sleep(1.2)
        for p in (b, a):
            with pytest.raises(HandshakeRefused) as refused:
                ws_connect(p.port, key=key).close()
            check_concurrency_429(refused.value.resp)
        assert ws_upstream.stats()["ws_max"].get(user, 0) == 1
        ws.send_text("still here")
        assert ws.recv_message() == (1, b"still here")
    finally:
        ws.close()


def test_flushall_does_not_free_the_slots_of_running_requests(catalog, proxies, redis_factory, ws_upstream):
    """Concurrency 1, a request running through proxy A, then FLUSHALL: the proxy that runs
    it refuses the user's next requests at once, on every worker (it knows what it holds),
    and puts its lease back so that proxy B refuses them too (before: 11 sequential requests
    all got 200)."""
    user, key = conc_plan(catalog, 1)
    rd = redis_factory()
    a = redis_proxy(proxies, catalog, rd, ws_upstream, limits={"lease_ttl_ms": 30000})
    b = redis_proxy(proxies, catalog, rd, ws_upstream, limits={"lease_ttl_ms": 30000})
    s = hold(a.port, key)
    try:
        assert wait_stat(ws_upstream, "open", user, 1) == 1
        assert rd.cmd("FLUSHALL") == "OK"
        for i in range(8):
            check_concurrency_429(a.get("/slow/0", key=key))
        # the lease is back in Redis (well before the 10 s renewal): B refuses too
        assert wait_until(lambda: rd.cmd("DBSIZE") > 0, 2 * SLOW), "the lease was not put back"
        for i in range(8):
            check_concurrency_429(b.get("/slow/0", key=key))
        assert max_open(ws_upstream, user) == 1
    finally:
        s.close()


# --------------------------------------------------------------------------------------
# a store that answers with an error


def health(p):
    r = p.admin("/health")
    return json.loads(r.body)


def store_lines(p):
    return [ln for ln in p.stderr().splitlines() if "store" in ln]


def test_wrong_password_is_a_named_store_error(catalog, proxies, redis_factory, tmp_path):
    """Redis requires a password and the proxy's URL has a wrong one: requests are decided
    by on_store_error (local: 200, decision local), stderr names WRONGPASS once (not once per
    request), /health says store error with the reason, and the password is written nowhere."""
    catalog.plan("pw", "--rate", "5/min")
    _, key = catalog.user_key("pw")
    rd = redis_factory()
    assert rd.cmd("CONFIG", "SET", "requirepass", "right-horse-battery") == "OK"
    url = "redis://:wrong-staple-9@127.0.0.1:%d/0" % rd.port
    p = proxies.start(catalog, store="redis", redis=rd, limits={"redis": url})
    rs = [p.get("/pw", key=key) for _ in range(7)]
    assert [r.status for r in rs] == [200] * 5 + [429] * 2, [r.status for r in rs]
    assert all(ln["decision"] == "local" for ln in p.access_log_lines() if ln.get("path") == "/pw")
    assert wait_until(lambda: any(re.search(r"store error: .*WRONGPASS", ln) for ln in store_lines(p)), 3 * SLOW), \
        p.stderr()[-2000:]
    h = health(p)
    assert h["store"] == "error" and "WRONGPASS" in h.get("store_error", ""), h
    named = [ln for ln in store_lines(p) if "WRONGPASS" in ln]
    assert len(named) == 1, named
    assert "wrong-staple-9" not in p.stderr()
    assert "wrong-staple-9" not in p.admin("/health").body.decode()


def test_check_fails_on_a_wrong_password_and_warns_on_an_unreachable_store(catalog, redis_factory, tmp_path):
    """`tierproxy --check` logs in to Redis: a wrong password exits 1 naming it (never the
    password); a Redis it cannot reach is a warning, exit 0; the right password passes."""
    rd = redis_factory()
    assert rd.cmd("CONFIG", "SET", "requirepass", "right-horse-battery") == "OK"
    ini = tmp_path / "check.ini"

    def check(url):
        write_ini(ini, {"proxy": {"listen": "127.0.0.1:1", "upstream": "http://127.0.0.1:2"},
                        "plans": {"db": str(catalog.path)},
                        "limits": {"store": "redis", "redis": url}})
        return subprocess.run([TIERPROXY_BIN, "-c", str(ini), "--check"], capture_output=True, text=True,
                              env=_clean_env(), timeout=30 * SLOW)
    r = check("redis://:wrong-staple-9@127.0.0.1:%d/0" % rd.port)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert re.search(r"WRONGPASS|password", r.stderr), r.stderr
    assert "wrong-staple-9" not in r.stderr + r.stdout
    r = check("redis://127.0.0.1:%d/0" % rd.port)
    assert r.returncode == 1 and "NOAUTH" in r.stderr, (r.returncode, r.stderr)
    r = check("redis://:right-horse-battery@127.0.0.1:%d/0" % rd.port)
    assert r.returncode == 0, r.stderr
    rd.stop()
    r = check("redis://:right-horse-battery@127.0.0.1:%d/0" % rd.port)
    assert r.returncode == 0, r.stderr
    assert [ln for ln in log_lines(r.stderr) if ln["level"] == "warn" and "[limits] redis" in ln["msg"]], r.stderr
    assert "right-horse-battery" not in r.stderr + r.stdout


def test_redis_out_of_memory_is_a_named_store_error(catalog, proxies, redis_factory):
    """Redis at maxmemory (noeviction): every check that would write fails with OOM. The
    requests are decided locally, stderr says OOM, /health says store error with the reason;
    when memory is back, /health is ok again and stderr says the store is back."""
    catalog.plan("oom", "--rate", "5/min")
    _, key = catalog.user_key("oom")
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd)
    assert p.get("/before", key=key).status == 200
    assert wait_until(lambda: health(p)["store"] == "ok", 5 * SLOW), health(p)
    rd.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    rd.cmd("CONFIG", "SET", "maxmemory", "1")
    rs = [p.get("/oom", key=key) for _ in range(6)]
    assert [r.status for r in rs] == [200] * 5 + [429], [r.status for r in rs]
    assert all(ln["decision"] == "local" for ln in p.access_log_lines() if ln.get("path") == "/oom")
    assert wait_until(lambda: any(re.search(r"store error: .*OOM", ln) for ln in store_lines(p)), 3 * SLOW), \
        p.stderr()[-2000:]
    h = health(p)
    assert h["store"] == "error" and "OOM" in h.get("store_error", ""), h
    assert len([ln for ln in store_lines(p) if "OOM" in ln]) == 1, store_lines(p)
    rd.cmd("CONFIG", "SET", "maxmemory", "0")
    assert wait_until(lambda: p.get("/after", key=key).status in (200, 429) and health(p)["store"] == "ok",
                      5 * SLOW), health(p)
    assert wait_until(lambda: any(re.search(r"store (is )?back", ln) for ln in store_lines(p)), 3 * SLOW), \
        store_lines(p)


# --------------------------------------------------------------------------------------
# the memory store's eviction


def eviction_proxy(proxies, catalog, cap):
    catalog.plan("anon", "--rate", "1000/min")
    return proxies.start(catalog, auth={"anonymous_plan": "anon"}, proxy={"trusted_proxies": "127.0.0.1/32"},
                         limits={"memory_max_subjects": cap})


def anonymous_flood(p, n):
    """n keyless requests, each from its own address of one IPv6 /64 (X-Forwarded-For from
    a trusted peer): n anonymous subjects."""
    for i in range(n):
        r = p.get("/anon", headers=[("X-Forwarded-For", "2001:db8:7:7::%x" % (i + 1))])
        assert r.status == 200, r


def test_eviction_never_forgets_a_users_quota(catalog, proxies):
    """memory_max_subjects 8, alice's quota 5/month: 3 used, then anonymous clients from 60
    addresses of one /64; alice still has exactly 2 left (before: 5 more)."""
    catalog.plan("monthly", "--rate", "1000/min", "--quota", "5/month")
    _, alice = catalog.user_key("monthly")
    p = eviction_proxy(proxies, catalog, 8)
    assert [p.get("/q", key=alice).status for _ in range(3)] == [200] * 3
    anonymous_flood(p, 60)
    got = [p.get("/q", key=alice).status for _ in range(4)]
    assert got == [200, 200, 429, 429], got


def test_eviction_takes_anonymous_subjects_first(catalog, proxies):
    """memory_max_subjects 8, bob's rate 3/min: 3 used, then anonymous clients from 60
    addresses: the anonymous ones are evicted, not bob, whose next request is still refused."""
    catalog.plan("three", "--rate", "3/min")
    _, bob = catalog.user_key("three")
    p = eviction_proxy(proxies, catalog, 8)
    assert [p.get("/r", key=bob).status for _ in range(3)] == [200] * 3
    anonymous_flood(p, 60)
    assert p.get("/r", key=bob).status == 429
