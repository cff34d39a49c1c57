"""SPEC "Additions of 2026-11-28", "Day two": /health answers what a load balancer needs.
200 whenever this proxy serves requests as configured: {"status":"degraded","store":"local"}
(or "open") while the store is unreachable and on_store_error decides; 503 only when
requests would get 503 (the store unreachable under closed, or no catalog). One stderr
line when the store becomes unreachable (with the reason) and one when it is back (with
how long it was away), each one JSON object."""
import json
import signal
import time

import pytest

from conftest import SLOW, wait_until, write_ini


def health(p):
    r = p.admin("/health")
    return r.status, r.json()


def store_is_ok(p):
    status, body = health(p)
    return status == 200 and body.get("store") == "ok"


def limited_user(catalog):
    # a rate and a concurrency limit: both on_store_error settings decide its requests
    catalog.plan("both", "--rate", "1000/min", "--concurrency", "50")
    return catalog.user_key("both")[1]


def start_on_redis(catalog, proxies, rd, mode, **proxy):
    p = proxies.start(catalog, store="redis", redis=rd, proxy=proxy,
                      limits={"on_store_error": mode, "concurrency_on_store_error": mode})
    # a loaded box may serve before its Redis connection is up
    assert wait_until(lambda: store_is_ok(p), 10 * SLOW), health(p)
    return p


def wait_for_health(p, pred, timeout):
    seen = {}

    def check():
        seen["last"] = health(p)
        return pred(*seen["last"])
    wait_until(check, timeout, interval=0.1)
    return seen["last"]


@pytest.mark.parametrize("mode", ["local", "open"])
def test_health_is_200_degraded_while_on_store_error_serves(catalog, proxies, redis_factory, mode):
    """Redis stopped under on_store_error = local (or open): requests are still served, so
    /health stays 200 and says how they are decided; a load balancer keeps the proxy."""
    key = limited_user(catalog)
    rd = redis_factory()
    p = start_on_redis(catalog, proxies, rd, mode)
    version = health(p)[1].get("catalog_version")
    rd.stop()
    assert p.get("/during", key=key).status == 200
    status, body = wait_for_health(p, lambda s, b: b.get("store") != "ok", 5 * SLOW)
    assert status == 200 and body.get("status") == "degraded" and body.get("store") == mode, (status, body)
    # the members /health had before stay
    assert body.get("plans") == "ok" and body.get("catalog_version") == version, body
    assert p.get("/during", key=key).status == 200
    redis_factory(port=rd.port)
    status, body = wait_for_health(p, lambda s, b: b.get("store") == "ok", 10 * SLOW)
    assert status == 200 and body.get("status") == "ok" and body.get("store") == "ok", (status, body)


def test_health_is_503_when_closed_refuses(catalog, proxies, redis_factory):
    """Under on_store_error = closed every limited request gets 503 while Redis is away:
    /health says 503 too, and 200 again once Redis is back."""
    key = limited_user(catalog)
    rd = redis_factory()
    p = start_on_redis(catalog, proxies, rd, "closed")
    rd.stop()
    assert p.get("/during", key=key).status == 503
    status, body = wait_for_health(p, lambda s, b: s == 503, 5 * SLOW)
    assert status == 503 and body.get("status") != "ok" and body.get("store") != "ok", (status, body)
    redis_factory(port=rd.port)
    status, body = wait_for_health(p, lambda s, b: s == 200, 10 * SLOW)
    assert status == 200 and body.get("status") == "ok" and body.get("store") == "ok", (status, body)
    # concurrency checks wait for the leases' registration (well under a second)
    assert wait_until(lambda: p.get("/after", key=key).status == 200, 5 * SLOW)


def test_concurrency_closed_alone_keeps_200_and_is_named(catalog, proxies, redis_factory):
    """on_store_error = local with concurrency_on_store_error = closed: with Redis away a
    plan with a concurrency limit gets 503, the others are served locally. The proxy still
    serves, so /health stays 200 and names what refuses."""
    key = limited_user(catalog)
    catalog.plan("rates", "--rate", "1000/min")
    rate_key = catalog.user_key("rates")[1]
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd,
                      limits={"on_store_error": "local", "concurrency_on_store_error": "closed"})
    assert wait_until(lambda: store_is_ok(p), 10 * SLOW), health(p)
    rd.stop()
    assert p.get("/during", key=key).status == 503
    assert p.get("/during", key=rate_key).status == 200
    status, body = wait_for_health(p, lambda s, b: b.get("store") != "ok", 5 * SLOW)
    assert (status, body.get("status"), body.get("store"), body.get("concurrency")) == \
        (200, "degraded", "local", "closed"), (status, body)


@pytest.mark.parametrize("mode,expect", [("local", 200), ("closed", 503)])
def test_a_store_answering_errors_is_decided_as_an_unreachable_one(catalog, proxies, redis_factory, mode,
                                                                    expect):
    """Redis at maxmemory answers every check with OOM: a store error, decided by
    on_store_error like a store that is gone. /health says "error" with the reason, and
    200 while on_store_error serves, 503 under closed."""
    key = limited_user(catalog)
    rd = redis_factory()
    p = start_on_redis(catalog, proxies, rd, mode)
    rd.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    rd.cmd("CONFIG", "SET", "maxmemory", "1")
    assert p.get("/during", key=key).status == expect
    status, body = wait_for_health(p, lambda s, b: b.get("store") == "error", 5 * SLOW)
    assert status == expect and body.get("store") == "error" and "OOM" in body.get("store_error", ""), \
        (status, body)
    assert body.get("status") == ("degraded" if expect == 200 else "unavailable"), body
    rd.cmd("CONFIG", "SET", "maxmemory", "0")
    assert wait_until(lambda: p.get("/after", key=key).status == 200 and store_is_ok(p), 5 * SLOW), health(p)


def test_a_reload_of_on_store_error_is_seen_by_health(catalog, proxies, redis_factory):
    """SIGHUP from local to closed while Redis is away: requests get 503 from then on, and
    so does /health."""
    key = limited_user(catalog)
    rd = redis_factory()
    p = start_on_redis(catalog, proxies, rd, "local")
    rd.stop()
    status, body = wait_for_health(p, lambda s, b: b.get("store") == "local", 5 * SLOW)
    assert status == 200, (status, body)
    p.ini["limits"].update({"on_store_error": "closed", "concurrency_on_store_error": "closed"})
    write_ini(p.ini_path, p.ini)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: p.get("/during", key=key).status == 503, 5 * SLOW)
    status, body = health(p)
    assert status == 503 and body.get("store") == "unreachable", (status, body)


def json_lines(text):
    """Every stderr line that names the store, parsed; a line that is not one JSON object
    fails the test."""
    lines = []
    for ln in text.splitlines():
        if "store" not in ln.lower():
            continue
        try:
            obj = json.loads(ln)
        except ValueError:
            pytest.fail("a store line on stderr is not JSON: %r" % ln)
        assert isinstance(obj, dict), ln
        lines.append(obj)
    return lines


def test_one_line_when_the_store_goes_and_one_when_it_is_back(catalog, proxies, redis_factory):
    """Two workers, Redis killed while requests keep coming (each fails its check, and each
    worker's reconnection fails again and again), then started again: stderr has exactly
    one line for the store going, naming the reason, and one for its return, with how long
    it was away; each is one JSON object."""
    key = limited_user(catalog)
    rd = redis_factory()
    p = start_on_redis(catalog, proxies, rd, "local", workers=2)
    before = len(p.stderr().splitlines())
    t_stop = time.monotonic()
    rd.stop()
    # well past the 250 ms reconnection backoff: many failed checks and connections
    while time.monotonic() - t_stop < 2.0:
        assert p.get("/during", key=key).status == 200
        time.sleep(0.05)
    redis_factory(port=rd.port)
    t_back = time.monotonic()
    assert wait_until(lambda: store_is_ok(p), 10 * SLOW), health(p)

    def back_line():
        return [ln for ln in json_lines("\n".join(p.stderr().splitlines()[before:]))
                if "away_ms" in ln or "back" in ln.get("msg", "")]
    assert wait_until(back_line, 3 * SLOW), p.stderr()[-3000:]
    lines = json_lines("\n".join(p.stderr().splitlines()[before:]))
    assert len(lines) == 2, "expected one line when the store went and one when it came back:\n%s" % \
        "\n".join(json.dumps(ln) for ln in lines)
    gone, back = lines
    assert gone.get("level") == "error", gone
    reason = gone.get("store_error", "")
    assert "127.0.0.1:%d" % rd.port in reason and reason in gone.get("msg", ""), gone
    assert "unreachable" in gone.get("msg", ""), gone
    away_ms = back.get("away_ms")
    assert isinstance(away_ms, int), back
    outage_s = t_back - t_stop
    assert 1000 <= away_ms <= (outage_s + 10 * SLOW) * 1000, (away_ms, outage_s, back)
    assert "back" in back.get("msg", ""), back
