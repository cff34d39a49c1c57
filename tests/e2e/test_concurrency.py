"""Concurrency limits (plan add --concurrency N, limit add --concurrency N --route): requests
in flight of one user, counted fleet-wide on Redis by several proxies and per process on the
memory store. Over the limit: 429 concurrency_limit_exceeded with Retry-After. Slots come
back when the response ends, when the client goes away, on upstream error or timeout.

The upstream (ws_upstream.py) counts what it has open per user itself, so "never more than N
at once" is judged where it matters."""
import signal
import socket
import time


from conftest import SLOW, assert_json_error, wait_until
from fleet_helpers import (check_concurrency_429, error_code, fleet, http_read, http_send,
                           parallel_requests, wait_stat, ws_upstream)  # noqa: F401


def conc_plan(catalog, n, name="conc"):
    catalog.plan(name, "--rate", "100000/min", "--concurrency", str(n))
    return catalog.user_key(name)


def start_held(port, target, key):
    """Sends a request on a fresh socket and returns the socket (answer not read)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    http_send(s, "GET", target, key=key)
    return s


def check_sigterm_cut_requests_give_back(a, b, users, ws_upstream):
    """users: (who, user, key), each with concurrency 1. A request of each hangs at the upstream
    through proxy a; a gets SIGTERM and exits after its drain; b must then admit each user
    at once (the caller's lease TTL is far longer)."""
    held = []
    try:
        for _, _, key in users:
            held.append(start_held(a.port, "/hang", key))
        for who, user, key in users:
            assert wait_stat(ws_upstream, "open", user, 1) == 1, "%sthe hanging request never arrived" % who
            check_concurrency_429(b.get("/slow/0", key=key))
        t0 = time.monotonic()
        a.signal(signal.SIGTERM)
        a.proc.wait(40 * SLOW)
        assert a.proc.returncode == 0, a.stderr()[-2000:]
        for who, _, key in users:
            r = b.get("/slow/0", key=key)
            assert r.status == 200, "%sthe slot of the request cut at the drain deadline is not back %.1f s " \
                "after SIGTERM (lease_ttl_ms 120000): %r" % (who, time.monotonic() - t0, r)
    finally:
        for s in held:
            s.close()


def test_third_parallel_request_gets_429_across_two_proxies(catalog, proxies, redis,
                                                            ws_upstream):
    user, key = conc_plan(catalog, 2)
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    held = [start_held(a.port, "/slow/2500", key), start_held(b.port, "/slow/2500", key)]
    try:
        assert wait_stat(ws_upstream, "open", user, 2) == 2, "the two slow requests never arrived"
        r = a.get("/slow/0", key=key)
        check_concurrency_429(r)
        r = b.get("/slow/0", key=key)
        check_concurrency_429(r)
        for s in held:
            r = http_read(s)
            assert r.status == 200, r
    finally:
        for s in held:
            s.close()
    # both slots are back after the responses ended: two in parallel again, one per proxy
    rs = parallel_requests([(a.port, "GET", "/slow/300", key), (b.port, "GET", "/slow/300", key)])
    assert [r.status for r in rs] == [200, 200], rs
    assert ws_upstream.stats()["max_open"][user] == 2


def test_slot_back_after_client_abort(catalog, proxies, redis, ws_upstream):
    user, key = conc_plan(catalog, 2)
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    sa = start_held(a.port, "/hang", key)
    sb = start_held(b.port, "/hang", key)
    try:
        assert wait_stat(ws_upstream, "open", user, 2) == 2
        check_concurrency_429(b.get("/slow/0", key=key))
        # the client on proxy A goes away while the upstream is still working on it
        sa.close()
        ok = wait_until(lambda: b.get("/slow/0", key=key).status == 200, 3 * SLOW, 0.1)
        assert ok, "the aborted request's slot did not come back within %ss" % (3 * SLOW)
        # and the proxy gave up the upstream request too
        assert wait_stat(ws_upstream, "hang_closed", user, 1) == 1, \
            "the proxy kept the upstream request of a client that went away"
        # the other one too (client on proxy B)
        sb.close()
        assert wait_stat(ws_upstream, "open", user, 0) == 0
        ok = wait_until(lambda: [r.status for r in parallel_requests(
            [(a.port, "GET", "/slow/200", key), (b.port, "GET", "/slow/200", key)])] == [200, 200],
            3 * SLOW, 0.1)
        assert ok, "both slots not back after both clients went away"
    finally:
        sa.close()
        sb.close()


def test_slot_back_after_upstream_timeout(catalog, proxies, redis, ws_upstream):
    user, key = conc_plan(catalog, 2)
    a, b = fleet(proxies, catalog, redis, ws_upstream,
                 proxy={"upstream_timeout_ms": int(1500 * SLOW)})
    held = [start_held(a.port, "/hang", key), start_held(b.port, "/hang", key)]
    try:
        assert wait_stat(ws_upstream, "open", user, 2) == 2
        check_concurrency_429(a.get("/slow/0", key=key))
        for s in held:
            r = http_read(s)
            assert_json_error(r, 504, {"error_code": "upstream_timeout"})
    finally:
        for s in held:
            s.close()
    rs = parallel_requests([(a.port, "GET", "/slow/300", key), (b.port, "GET", "/slow/300", key)])
    assert [r.status for r in rs] == [200, 200], rs


def test_slot_back_after_upstream_error(catalog, proxies, redis):
    user, key = conc_plan(catalog, 1)
    # nothing listens on the upstream's port: every request is a 502, none may keep its slot
    dead = "http://127.0.0.1:%d" % _dead_port()
    (p,) = fleet(proxies, catalog, redis, dead, n=1)
    for _ in range(3):
        assert_json_error(p.get("/x", key=key), 502, {"error_code": "upstream_unavailable"})


def _dead_port():
    from conftest import free_port
    return free_port()


def test_memory_store_counts_per_process(catalog, proxies, ws_upstream):
    user, key = conc_plan(catalog, 2)
    a = proxies.start(catalog, store="memory", upstream=ws_upstream)
    b = proxies.start(catalog, store="memory", upstream=ws_upstream)
    held = [start_held(a.port, "/slow/2000", key), start_held(a.port, "/slow/2000", key)]
    try:
        assert wait_stat(ws_upstream, "open", user, 2) == 2
        check_concurrency_429(a.get("/slow/0", key=key))
        # another process has its own count
        assert b.get("/slow/0", key=key).status == 200
        for s in held:
            assert http_read(s).status == 200
    finally:
        for s in held:
            s.close()
    assert a.get("/slow/0", key=key).status == 200


def test_route_concurrency_limit(catalog, proxies, redis, ws_upstream):
    catalog.plan("routed", "--rate", "100000/min", "--concurrency", "10")
    catalog.limit("routed", "--concurrency", "1", "--route", "GET /slow")
    user, key = catalog.user_key("routed")
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    s = start_held(a.port, "/slow/2000", key)
    try:
        assert wait_stat(ws_upstream, "open", user, 1) == 1
        check_concurrency_429(b.get("/slow/0", key=key))
        # other routes and other methods are not under the route's limit
        assert b.get("/other", key=key).status == 200
        assert b.request("POST", "/slow/0", key=key, body=b"").status == 200
        assert http_read(s).status == 200
    finally:
        s.close()
    assert b.get("/slow/0", key=key).status == 200


def race(ports, key, attempts, hold_ms):
    targets = [(ports[i % len(ports)], "GET", "/slow/%d" % hold_ms, key) for i in range(attempts)]
    rs = parallel_requests(targets, timeout=30)
    statuses = {}
    for r in rs:
        assert r is not None, "a connection failed during the race"
        if r.status == 429:
            assert error_code(r) == "concurrency_limit_exceeded", r
        else:
            assert r.status == 200, r
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return statuses


def test_race_200_attempts_two_proxies_limit_10(catalog, proxies, redis, ws_upstream):
    catalog.plan("race", "--rate", "1000000/min", "--concurrency", "10")
    users = [catalog.user_key("race") for _ in range(5)]   # before the proxies start
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    hold = int(800 * SLOW)
    for rep, (user, key) in enumerate(users):
        st = race([a.port, b.port], key, 200, hold)
        stats = ws_upstream.stats()
        most = stats["max_open"].get(user, 0)
        assert most <= 10, "rep %d: the upstream saw %d requests of one user open at once " \
            "(limit 10); answers %r" % (rep, most, st)
        assert st.get(200, 0) >= 10 and most >= 1, "rep %d: too few admitted: %r" % (rep, st)
        assert stats["open"].get(user, 0) == 0
        print("race rep %d: answers %r, upstream max open %d" % (rep, st, most))


def test_race_memory_store_one_proxy(catalog, proxies, ws_upstream):
    catalog.plan("race", "--rate", "1000000/min", "--concurrency", "10")
    user, key = catalog.user_key("race")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    st = race([p.port], key, 100, int(800 * SLOW))
    most = ws_upstream.stats()["max_open"].get(user, 0)
    assert 1 <= most <= 10, (most, st)
    assert st.get(200, 0) >= 10, st


def test_slot_back_after_client_abort_mid_stream(catalog, proxies, redis, ws_upstream):
    user, key = conc_plan(catalog, 1)
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    s = start_held(a.port, "/stream/100/100", key)
    try:
        # the stream has started: its head and first chunk came through
        s.settimeout(10)
        got = b""
        while b"chunk 0" not in got:
            chunk = s.recv(4096)
            assert chunk, "the stream ended early: %r" % got
            got += chunk
        assert got.startswith(b"HTTP/1.1 200"), got
        check_concurrency_429(b.get("/slow/0", key=key))
    finally:
        s.close()          # mid-stream
    ok = wait_until(lambda: b.get("/slow/0", key=key).status == 200, 3 * SLOW, 0.1)
    assert ok, "the slot of a stream whose client went away did not come back"
    assert wait_stat(ws_upstream, "hang_closed", user, 1) == 1, \
        "the proxy kept streaming from the upstream for a client that went away"


def test_leases_outlive_their_ttl_while_held(catalog, proxies, redis, ws_upstream):
    """A request running longer than lease_ttl_ms keeps its slot (the proxy renews it)."""
    user, key = conc_plan(catalog, 2)
    ttl_ms = 900
    a, b = fleet(proxies, catalog, redis, ws_upstream, limits={"lease_ttl_ms": ttl_ms})
    held = [start_held(a.port, "/slow/%d" % (4 * ttl_ms), key),
            start_held(b.port, "/slow/%d" % (4 * ttl_ms), key)]
    try:
        assert wait_stat(ws_upstream, "open", user, 2) == 2
        for _ in range(6):                  # over about 3 TTLs
            time.sleep(ttl_ms / 2000.0)
            if ws_upstream.stat("open", user) < 2:
                break
            r = (a, b)[_ % 2].get("/slow/0", key=key)
            check_concurrency_429(r)
        for s in held:
            assert http_read(s).status == 200
    finally:
        for s in held:
            s.close()


def test_rate_rejection_keeps_no_concurrency_slot(catalog, proxies, redis, ws_upstream):
    catalog.plan("mix", "--rate", "100000/min", "--concurrency", "1")
    catalog.limit("mix", "--rate", "1/min", "--route", "GET /once")
    user, key = catalog.user_key("mix")
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    assert a.get("/once", key=key).status == 200
    for p in (a, b, a):
        r = p.get("/once", key=key)
        assert r.status == 429 and error_code(r) == "rate_limit_exceeded", r
    # had a refused request kept its concurrency slot, this would be 429 concurrency
    for p in (a, b):
        r = p.get("/other", key=key)
        assert r.status == 200, r


def test_concurrency_rejection_does_not_count_against_the_rate(catalog, proxies, redis,
                                                                 ws_upstream):
    catalog.plan("mix3", "--rate", "3/min", "--concurrency", "1")
    user, key = catalog.user_key("mix3")
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    s = start_held(a.port, "/slow/%d" % int(1000 * SLOW), key)         # rate 1 of 3
    try:
        assert wait_stat(ws_upstream, "open", user, 1) == 1
        for p in (a, b, a, b, a):
            check_concurrency_429(p.get("/slow/0", key=key))
        assert http_read(s).status == 200
    finally:
        s.close()
    assert a.get("/slow/0", key=key).status == 200                      # rate 2 of 3
    assert b.get("/slow/0", key=key).status == 200                      # rate 3 of 3
    r = a.get("/slow/0", key=key)
    assert r.status == 429 and error_code(r) == "rate_limit_exceeded", r


def test_slot_back_after_client_abort_mid_upload(catalog, proxies, redis, ws_upstream):
    user, key = conc_plan(catalog, 1)
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    for p in (a, b):
        s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
        s.sendall(b"POST /slow/0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
                  b"\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 20000)
        time.sleep(0.2)
        s.close()                        # 980 000 bytes of the body never come
    ok = wait_until(lambda: b.get("/slow/0", key=key).status == 200 and
                    a.get("/slow/0", key=key).status == 200, 3 * SLOW, 0.1)
    assert ok, "a slot stayed taken after a client gave up mid-upload"


def test_sigterm_gives_back_the_slots_of_requests_cut_at_the_drain_deadline(catalog, proxies, redis, ws_upstream):
    """SIGTERM while requests outlive the drain (the upstream never answers): what the proxy
    still holds at the drain deadline goes back in one call before it exits, long before the
    lease TTL. Those requests are cut, not ended: no release of their own gives the slot back."""
    user, key = conc_plan(catalog, 1, "concdrain")
    a, b = fleet(proxies, catalog, redis, ws_upstream, limits={"lease_ttl_ms": 120000})
    check_sigterm_cut_requests_give_back(a, b, [("", user, key)], ws_upstream)
