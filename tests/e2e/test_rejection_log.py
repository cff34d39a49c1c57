"""SPEC "Clients as they are": a burst of rejections is reported with its full count within
10 s of its end. The rejection warning is written at most once per user and limit per 10 s;
the rejections held back come out on their own (a timer on the worker's loop), not only when
another rejection of that user comes 10 s later."""
import datetime
import json
import signal
import threading
import time

from conftest import SLOW, http_request, wait_until

INTERVAL_S = 10


def warnings_for(p, user):
    out = []
    for ln in p.stderr().splitlines():
        if ln.startswith("{") and "limit exceeded" in ln:
            w = json.loads(ln)
            if w.get("user_id") == user:
                out.append(w)
    return out


def line_time(w):
    return datetime.datetime.strptime(w["time"], "%Y-%m-%dT%H:%M:%S.%fZ").timestamp()


def reported(p, user):
    return sum(w["rejections"] for w in warnings_for(p, user))


def burst(p, key, n, threads=8):
    """n rejected requests, each on a connection of its own (the kernel spreads them over
    the workers); returns when the last answer is in."""
    statuses = []
    per = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]

    def run(count):
        for _ in range(count):
            statuses.append(http_request(p.port, "GET", "/r", key=key).status)
    ts = [threading.Thread(target=run, args=(c,)) for c in per]
    for t in ts:
        t.start()
    for t in ts:
        t.join(300)
    assert statuses == [429] * n, "not all rejected: %r" % sorted(set(statuses))


def test_a_burst_is_reported_with_its_full_count_without_a_later_rejection(catalog, proxies):
    catalog.plan("one", "--rate", "1/min")
    user, key = catalog.user_key("one")
    other, other_key = catalog.user_key("one")
    p = proxies.start(catalog, store="memory", proxy={"workers": 2})
    assert p.get("/r", key=key).status == 200
    assert p.get("/r", key=other_key).status == 200
    # two users at once: each has a budget of its own
    side = threading.Thread(target=burst, args=(p, other_key, 300, 2))
    side.start()
    burst(p, key, 2000)
    side.join(300)
    ended = time.monotonic()
    # the first rejection of each is written at once
    assert wait_until(lambda: warnings_for(p, user) and warnings_for(p, other), 5 * SLOW), \
        p.stderr()[-2000:]
    assert warnings_for(p, user)[0]["rejections"] == 1, warnings_for(p, user)
    # ... and the rest within 10 s of the burst's end, with no rejection after it
    wait_until(lambda: reported(p, user) >= 2000 and reported(p, other) >= 300,
               INTERVAL_S + 5 * SLOW)
    assert reported(p, user) == 2000, "%.1f s after the burst: %r" % (time.monotonic() - ended,
                                                                      warnings_for(p, user))
    assert reported(p, other) == 300, warnings_for(p, other)
    lines = warnings_for(p, user)
    assert lines[-1]["limit_type"] == "http" and lines[-1]["limit"] == 1, lines
    # never more than one line per 10 s
    times = [line_time(w) for w in lines]
    assert all(b - a >= INTERVAL_S - 0.001 for a, b in zip(times, times[1:])), lines
    assert key not in p.stderr() and other_key not in p.stderr()


def test_held_back_rejections_are_reported_when_the_proxy_stops(catalog, proxies):
    catalog.plan("one", "--rate", "1/min")
    user, key = catalog.user_key("one")
    p = proxies.start(catalog, store="memory", proxy={"workers": 2})
    assert p.get("/r", key=key).status == 200
    burst(p, key, 20, threads=2)
    assert wait_until(lambda: warnings_for(p, user), 5 * SLOW), p.stderr()[-2000:]
    p.signal(signal.SIGTERM)
    assert p.proc.wait(30 * SLOW) == 0
    assert reported(p, user) == 20, warnings_for(p, user)
