"""Redis killed under load: rate limits follow on_store_error (open: forwarded without
RateLimit headers; closed: 503 limiter_unavailable), concurrency limits follow
concurrency_on_store_error; every answer while Redis is down comes at once (measured per
request on an already-open keep-alive connection); enforcement is back within about a
second of Redis restarting on the same port."""
import json
import select
import statistics
import threading
import time

import pytest

from conftest import SLOW, Client, assert_json_error, ietf_policy, ratelimit_headers
from fleet_helpers import check_concurrency_429, http_read, http_send, ws_upstream  # noqa: F401

# "At once" means without waiting on the store: a request that waited for it would take
# the worker's store command timeout (500 ms, proxy/worker.c). Half of it tells the two
# apart on a loaded box; how fast the answers are is reported, and is the benchmarks' to judge.
P95_MAX_S = 0.250
RECOVERY_MAX_S = 2.0       # "within ~1 s" of Redis answering PING again, with slack
SAMPLES = 100


class Load:
    """Background requests on keep-alive connections until stopped (bounded)."""

    def __init__(self, port, key, threads=2, max_requests=20000):
        self.stop_ev = threading.Event()
        self.count = 0
        self.ts = [threading.Thread(target=self.run, args=(port, key, max_requests),
                                    daemon=True) for _ in range(threads)]
        for t in self.ts:
            t.start()

    def run(self, port, key, max_requests):
        c = Client(port, timeout=5)
        for _ in range(max_requests):
            if self.stop_ev.is_set():
                break
            try:
                c.get("/load", key=key)
                self.count += 1
            except Exception:
                c.close()
                time.sleep(0.01)
        c.close()

    def stop(self):
        self.stop_ev.set()
        for t in self.ts:
            t.join(10)


def timed(client, key, n):
    """n requests on one keep-alive connection: ([Resp], [seconds], reconnections)."""
    rs, ts, reconnects = [], [], 0
    for _ in range(n):
        if client.conn is None:
            reconnects += 1
        t0 = time.monotonic()
        r = client.get("/during-outage", key=key)
        ts.append(time.monotonic() - t0)
        rs.append(r)
    return rs, ts, reconnects


def p95(ts):
    return sorted(ts)[int(len(ts) * 0.95) - 1]


def report(record_property, label, ts, reconnects):
    med, q95 = statistics.median(ts), p95(ts)
    msg = "%s: median %.2f ms, p95 %.2f ms, max %.2f ms over %d requests, %d reconnects" % (
        label, med * 1000, q95 * 1000, max(ts) * 1000, len(ts), reconnects)
    print(msg)
    record_property(label, msg)
    return med, q95


def held_then_probe(p, key, up, user, hold_ms):
    """Holds one slow request, waits until the upstream has it, then probes: the probe's
    Resp (429 when the concurrency limit of 1 is enforced)."""
    import socket
    s = socket.create_connection(("127.0.0.1", p.port), timeout=30)
    try:
        http_send(s, "GET", "/slow/%d" % hold_ms, key=key)
        t_end = time.monotonic() + 5
        while up.stat("open", user) < 1 and time.monotonic() < t_end:
            if select.select([s], [], [], 0.01)[0]:
                break       # answered (refused) without reaching the upstream
        r = p.get("/probe", key=key)
        held = http_read(s)
        return r, held
    finally:
        s.close()


CASES = [
    # (limit kind, on_store_error, concurrency_on_store_error, the outage's answer)
    ("rate", "open", "closed", 200),
    ("rate", "closed", "open", 503),
    ("concurrency", "closed", "open", 200),
    ("concurrency", "open", "closed", 503),
]


@pytest.mark.parametrize("kind,rate_mode,conc_mode,expect", CASES,
                         ids=["rate-open", "rate-closed", "concurrency-open", "concurrency-closed"])
def test_redis_killed_under_load(catalog, proxies, redis_factory, ws_upstream, record_property,
                                 kind, rate_mode, conc_mode, expect):
    if kind == "rate":
        catalog.plan("lim", "--rate", "100000/min")
    else:
        catalog.plan("lim", "--concurrency", "1")
    user, key = catalog.user_key("lim")
    _, load_key = catalog.user_key("lim")
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, upstream=ws_upstream,
                      limits={"on_store_error": rate_mode,
                              "concurrency_on_store_error": conc_mode})
    c = Client(p.port, timeout=10)
    r = c.get("/before", key=key)
    assert r.status == 200, r
    if kind == "rate":
        assert 100000 in ietf_policy(r).values(), r
    else:
        r, held = held_then_probe(p, key, ws_upstream, user, int(600 * SLOW))
        check_concurrency_429(r)
        assert held.status == 200
    load = Load(p.port, load_key) if kind == "rate" else None
    try:
        time.sleep(0.2)
        rd.stop()
        t_down = time.monotonic()
        rs, ts, reconnects = timed(c, key, SAMPLES)
        for r in rs:
            if expect == 200:
                assert r.status == 200, r
                assert ratelimit_headers(r) == [], "RateLimit headers with the store down: %r" % r
                assert json.loads(r.body)["path"] == "/during-outage", r
            else:
                assert_json_error(r, 503, {"error_code": "limiter_unavailable"})
        med, q95 = report(record_property, "%s-%s outage" % (kind, rate_mode if kind == "rate"
                                                               else conc_mode), ts, reconnects)
        assert q95 < P95_MAX_S, "answers with Redis down are slow: p95 %.1f ms" % (q95 * 1000)
        if kind == "concurrency" and expect == 200:
            # failing open: requests in parallel are all forwarded, none refused
            r, held = held_then_probe(p, key, ws_upstream, user, int(400 * SLOW))
            assert r.status == 200 and held.status == 200, (r, held)
        # Redis back on the same port, after an outage long enough for the proxy's
        # reconnection backoff to grow to its longest
        time.sleep(max(0.0, 2.0 - (time.monotonic() - t_down)))
        redis_factory(port=rd.port)
        t_back = time.monotonic()
        deadline = t_back + 10
        back = None
        while time.monotonic() < deadline:
            if kind == "rate":
                r = c.get("/after", key=key)
                if r.status == 200 and 100000 in ietf_policy(r).values():
                    back = time.monotonic() - t_back
                    break
            else:
                r, held = held_then_probe(p, key, ws_upstream, user, 300)
                if r.status == 429:
                    check_concurrency_429(r)
                    back = time.monotonic() - t_back
                    break
            time.sleep(0.02)
        assert back is not None, "enforcement not back 10 s after Redis restarted"
        print("%s: enforcement back %.2f s after Redis restarted" % (kind, back))
        record_property("recovery_s", "%.3f" % back)
        assert back < RECOVERY_MAX_S * SLOW, "enforcement back only after %.2f s" % back
    finally:
        if load:
            load.stop()
        c.close()
    if load:
        assert load.count > 0


def test_redis_frozen_answers_stay_fast(catalog, proxies, redis_factory, ws_upstream,
                                        record_property):
    """A Redis that stops answering (SIGSTOP) without closing: after the first timed-out
    command the proxy answers at once instead of waiting on the store per request."""
    catalog.plan("lim", "--rate", "100000/min")
    _, key = catalog.user_key("lim")
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, upstream=ws_upstream,
                      limits={"on_store_error": "closed"})
    c = Client(p.port, timeout=10)
    assert c.get("/before", key=key).status == 200
    rd.pause()
    try:
        first = c.get("/first", key=key)
        assert_json_error(first, 503, {"error_code": "limiter_unavailable"})
        rs, ts, reconnects = timed(c, key, SAMPLES)
        for r in rs:
            assert_json_error(r, 503, {"error_code": "limiter_unavailable"})
        print("first answer with Redis frozen: %.1f ms" % (first.elapsed * 1000))
        med, q95 = report(record_property, "rate-closed frozen", ts, reconnects)
        assert q95 < P95_MAX_S, "answers with Redis frozen are slow: p95 %.1f ms" % (q95 * 1000)
    finally:
        rd.resume()
        c.close()


def test_two_proxies_agree_again_after_restart(catalog, proxies, redis_factory, ws_upstream):
    """Slots held through a Redis restart are counted again once Redis is back (the proxies
    renew their leases into the new, empty Redis), so the fleet stays within the limit."""
    from fleet_helpers import fleet, ws_connect, ws_try, WS
    catalog.plan("c2", "--rate", "100000/min", "--concurrency", "2")
    user, key = catalog.user_key("c2")
    rd = redis_factory()
    a, b = fleet(proxies, catalog, rd, ws_upstream,
                 limits={"lease_ttl_ms": 1500, "concurrency_on_store_error": "closed"})
    ws = [ws_connect(a.port, "/ws", key=key), ws_connect(b.port, "/ws", key=key)]
    extra = []
    try:
        check_concurrency_429(ws_try(b.port, "/ws", key))
        rd.stop()
        time.sleep(1.0)     # long enough for the reconnection backoffs to spread out
        redis_factory(port=rd.port)
        t0 = time.monotonic()
        # from the moment Redis is back: no third WebSocket may open (6 clients hammering)
        answers = {}
        lock = threading.Lock()

        def hammer(px):
            for _ in range(2000):
                if time.monotonic() - t0 > 1.5:
                    break
                r = ws_try(px.port, "/ws", key)
                with lock:
                    if isinstance(r, WS):
                        extra.append(r)
                        print("a WebSocket over the limit opened on proxy %s %.3f s after "
                              "the restart" % ("a" if px is a else "b", time.monotonic() - t0))
                        answers[101] = answers.get(101, 0) + 1
                    else:
                        answers[r.status] = answers.get(r.status, 0) + 1
        ts = [threading.Thread(target=hammer, args=((a, b)[i % 2],)) for i in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        print("attempts after the restart: %r" % answers)
        most = ws_upstream.stats()["ws_max"].get(user, 0)
        assert not extra and most <= 2, "%d WebSockets over the limit of 2 opened after Redis " \
            "restarted (answers %r; the upstream saw %d open at once)" % (len(extra), answers, most)
        assert answers.get(429, 0) > 0, answers
        for w in ws:
            w.send_text("alive")
            assert w.recv_message()[1] == b"alive"
    finally:
        for w in ws + extra:
            w.close()


@pytest.mark.parametrize("mode", ["open", "closed"])
def test_websocket_handshake_with_redis_down(catalog, proxies, redis_factory, ws_upstream, mode):
    from fleet_helpers import WS, ws_try
    catalog.plan("wsc", "--concurrency", "3")
    _, key = catalog.user_key("wsc")
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, upstream=ws_upstream,
                      limits={"concurrency_on_store_error": mode})
    w = ws_try(p.port, "/ws", key)
    assert isinstance(w, WS), w
    rd.stop()
    try:
        # the tunnel opened before the outage is not cut by it
        w.send_text("during")
        assert w.recv_message()[1] == b"during"
        t0 = time.monotonic()
        r = ws_try(p.port, "/ws", key)
        took = time.monotonic() - t0
        if mode == "open":
            assert isinstance(r, WS), "handshake refused with the store down and open: %r" % r
            r.close()
        else:
            assert not isinstance(r, WS)
            assert_json_error(r, 503, {"error_code": "limiter_unavailable"})
        assert took < 1.0 * SLOW, "handshake answered after %.2fs with Redis down" % took
    finally:
        w.close()
