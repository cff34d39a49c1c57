"""What a client sees when the limiter store (Redis) is unreachable: on_store_error open
forwards without RateLimit headers, closed answers 503 limiter_unavailable; either way the
proxy answers promptly instead of waiting on the dead store for every request."""
import time

import pytest

from conftest import assert_json_error, ietf_policy, ratelimit_headers, wait_until

# Generous: the contract is "does not wait on a dead store for every request"; ten requests
# against a dead store must not take ten store timeouts.
TEN_REQUESTS_MAX_S = 10.0


def rate_only_plan(catalog):
    # rate limits only: concurrency limits follow concurrency_on_store_error instead
    catalog.plan("rateonly", "--rate", "1000/min")
    return catalog.user_key("rateonly")[1]


def ten_requests(p, key):
    t0 = time.monotonic()
    rs = [p.get("/during-outage", key=key, timeout=30) for _ in range(10)]
    return rs, time.monotonic() - t0


@pytest.mark.parametrize("outage", ["killed", "frozen"])
def test_store_down_open_forwards_without_headers(catalog, proxies, redis_factory, outage):
    key = rate_only_plan(catalog)
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd,
                      limits={"on_store_error": "open", "concurrency_on_store_error": "open"})
    r = p.get("/before", key=key)
    assert r.status == 200 and list(ietf_policy(r).values()) == [1000], r
    if outage == "killed":
        rd.stop()
    else:
        rd.pause()
    rs, took = ten_requests(p, key)
    for r in rs:
        assert r.status == 200, r
        assert ratelimit_headers(r) == [], r
        assert r.echo["path"] == "/during-outage"
    assert took < TEN_REQUESTS_MAX_S, "10 requests took %.1fs with the store down" % took
    if outage == "frozen":
        rd.resume()


@pytest.mark.parametrize("outage", ["killed", "frozen"])
def test_store_down_closed_is_503(catalog, proxies, redis_factory, outage):
    key = rate_only_plan(catalog)
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, limits={"on_store_error": "closed"})
    assert p.get("/before", key=key).status == 200
    if outage == "killed":
        rd.stop()
    else:
        rd.pause()
    rs, took = ten_requests(p, key)
    for r in rs:
        assert_json_error(r, 503, {"error_code": "limiter_unavailable"})
    assert took < TEN_REQUESTS_MAX_S, "10 requests took %.1fs with the store down" % took
    if outage == "frozen":
        rd.resume()


def test_store_comes_back(catalog, proxies, redis_factory):
    key = rate_only_plan(catalog)
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, limits={"on_store_error": "closed"})
    assert p.get("/x", key=key).status == 200
    rd.stop()
    assert p.get("/x", key=key).status == 503
    port = rd.port
    redis_factory(port=port)
    # once Redis is back on its address, requests are limited (and admitted) again
    ok = wait_until(lambda: p.get("/x", key=key).status == 200, 10, interval=0.2)
    assert ok, "still refusing 10 s after Redis came back"
    r = p.get("/x", key=key)
    assert r.status == 200 and list(ietf_policy(r).values()) == [1000], r
