"""SPEC "Clients as they are": error answers are RFC 9457 problem details
(application/problem+json with type, title, status, detail, plus error_code and
retry_after), and a 429 names every limit it was over in "violated-policies", by the names
the ietf RateLimit-Policy items of the same answer carry."""
import json
import socket
import threading

from conftest import http_request, parse_sf_list, raw_exchange, parse_raw_response, wait_until

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"


def problem(r, status, error_code):
    """r is a problem answer: application/problem+json, type, title, status, detail and
    error_code. Returns the parsed body."""
    assert r.status == status, "expected %d, got %r" % (status, r)
    ct = (r.header("Content-Type") or "").split(";")[0].strip().lower()
    assert ct == "application/problem+json", "not a problem+json answer: %r" % r
    body = json.loads(r.body)
    for member in ("type", "title", "detail"):
        assert isinstance(body.get(member), str) and body[member], (member, body)
    assert body.get("status") == status, body
    assert body.get("error_code") == error_code, body
    return body


def refusal_429(r, error_code):
    """A 429: the problem type of draft-ietf-httpapi-ratelimit-headers-11, retry_after
    equal to Retry-After. Returns (body, the ietf policy names of the same answer)."""
    body = problem(r, 429, error_code)
    assert body["type"] == QUOTA_EXCEEDED, body
    ra = r.header("Retry-After")
    assert ra is not None and ra.isdigit() and int(ra) >= 1, r
    assert body.get("retry_after") == int(ra), body
    assert isinstance(body.get("violated-policies"), list), body
    policy = r.header("RateLimit-Policy")
    assert policy is not None, "a 429 without RateLimit-Policy: %r" % r
    return body, [name for name, _ in parse_sf_list(policy)]


# ------------------------------------------------------------------ 429: the violated limits

def test_rate_429_names_the_violated_policy(catalog, proxies):
    catalog.plan("one", "--rate", "1/min")
    _, key = catalog.user_key("one")
    p = proxies.start(catalog)            # headers: the default style (ietf)
    assert p.get("/a", key=key).status == 200
    body, names = refusal_429(p.get("/a", key=key), "rate_limit_exceeded")
    assert body["violated-policies"] == ["one-1min"], body
    assert names == ["one-1min"], names
    assert body["detail"].startswith("Rate limit exceeded"), body


def test_a_request_over_two_limits_names_both(catalog, start_proxy):
    # a plan-wide rate and a route's rate, both spent by one request
    catalog.plan("two", "--rate", "1/10s", "--rate", "5/min")
    catalog.limit("two", "--rate", "1/min", "--route", "POST /upload")
    _, key = catalog.user_key("two")
    p = start_proxy(catalog)
    assert p.request("POST", "/upload/x", key=key, body=b"1").status == 200
    body, names = refusal_429(p.request("POST", "/upload/x", key=key, body=b"1"),
                              "rate_limit_exceeded")
    assert sorted(body["violated-policies"]) == ["two-10s", "two-POST /upload-1min"], body
    # the names are the ietf items' names of the same answer; the 5/min one had room
    assert set(body["violated-policies"]) < set(names), (body, names)
    assert "two-1min" in names and "two-1min" not in body["violated-policies"], (body, names)


def test_quota_429_names_the_quota(catalog, proxies):
    catalog.plan("q2", "--quota", "2/day", "--rate", "100/min")
    _, key = catalog.user_key("q2")
    p = proxies.start(catalog, limits={"headers": "draft"})
    assert [p.get("/q", key=key).status for _ in range(2)] == [200, 200]
    r = p.get("/q", key=key)
    body = problem(r, 429, "quota_exceeded")
    # named as the ietf items name it, whatever the header style
    assert body["violated-policies"] == ["q2-day"], body
    assert body["retry_after"] == int(r.header("Retry-After")), body
    assert body["detail"].startswith("Quota exceeded"), body


def test_concurrency_429_names_the_concurrency_limit(catalog, proxies, upstream_factory):
    up = upstream_factory()
    catalog.plan("c1", "--concurrency", "1")
    _, key = catalog.user_key("c1")
    p = proxies.start(catalog, upstream=up)
    held = []
    t = threading.Thread(target=lambda: held.append(http_request(p.port, "GET", "/slow/3000", key=key)))
    t.start()
    try:
        assert wait_until(lambda: up.stats()["inflight"] == 1, 10), "the first request never arrived"
        body, names = refusal_429(p.get("/c", key=key), "concurrency_limit_exceeded")
        assert body["violated-policies"] == ["c1-concurrency"], body
        assert names == ["c1-concurrency"], names
    finally:
        t.join(30)
    assert held and held[0].status == 200, held


def test_cost_weighted_429_names_the_limit_it_would_pass(catalog, proxies):
    # 6 units of 10 spent: a request of cost 6 is over, with 4 left (not 0)
    catalog.plan("w", "--rate", "10/min")
    catalog.run("cost", "set", "w", "POST /batch", "6")
    _, key = catalog.user_key("w")
    p = proxies.start(catalog)
    first = p.request("POST", "/batch", key=key, body=b"1")
    assert first.status == 200, first
    assert dict(parse_sf_list(first.header("RateLimit")))["w-1min"]["r"] == 4, first
    body, names = refusal_429(p.request("POST", "/batch", key=key, body=b"1"), "rate_limit_exceeded")
    assert body["violated-policies"] == ["w-1min"], body
    # a request of cost 1 still fits: the 6-unit one was over, not the limit spent
    assert p.get("/one", key=key).status == 200


# ------------------------------------------------------------------ every other error answer

def test_missing_and_invalid_key_are_problems(catalog, proxies):
    p = proxies.start(catalog)
    r = p.get("/k")
    body = problem(r, 401, "missing_api_key")
    assert body["type"] == "about:blank" and body["title"] == "Unauthorized", body
    assert r.header("WWW-Authenticate", "").startswith("Bearer"), r
    problem(p.get("/k", key="not-a-key"), 401, "invalid_api_key")


def test_store_closed_is_a_problem(catalog, proxies, redis_factory):
    rs = redis_factory()
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, store="redis", redis=rs, limits={"on_store_error": "closed",
                                                               "concurrency_on_store_error": "closed"})
    assert p.get("/s", key=key).status == 200
    rs.close()
    r = wait_until(lambda: (lambda r: r if r.status == 503 else None)(p.get("/s", key=key)), 10)
    assert r, "no 503 with the store gone under on_store_error = closed"
    problem(r, 503, "limiter_unavailable")


def test_upstream_failures_are_problems(catalog, proxies):
    _, key = catalog.user_key("free")
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()          # nothing listens there
    p = proxies.start(catalog, upstream="http://127.0.0.1:%d" % port)
    problem(p.get("/u", key=key), 502, "upstream_unavailable")


def test_upstream_timeout_is_a_problem(catalog, proxies):
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, proxy={"upstream_timeout_ms": 300})
    problem(p.get("/hang", key=key), 504, "upstream_timeout")


def test_bad_target_and_big_body_are_problems(catalog, proxies):
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, proxy={"max_body_bytes": 100})
    problem(p.get("/a%2Fb", key=key), 400, "bad_request_target")
    raw = raw_exchange(p.port, b"POST /b HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + key.encode() +
                       b"\r\nContent-Length: 1000\r\n\r\n")
    problem(parse_raw_response(raw), 413, "request_too_large")


def test_shed_request_is_a_problem(catalog, proxies, upstream_factory):
    up = upstream_factory()
    catalog.plan("low", "--rate", "100/min", "--priority", "0")
    _, key = catalog.user_key("low")
    _, busy_key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up, proxy={"upstream_max_inflight": 1})
    # one request in flight: priority 0 is forwarded only while none is
    busy = threading.Thread(target=lambda: http_request(p.port, "GET", "/slow/2000", key=busy_key))
    busy.start()
    try:
        assert wait_until(lambda: up.stats()["inflight"] == 1, 5)
        r = p.get("/shed", key=key)
    finally:
        busy.join(30)
    body = problem(r, 503, "upstream_saturated")
    assert r.header("Retry-After") == "1", r
    assert body["type"] == "about:blank" and body["title"] == "Service Unavailable", body


def test_malformed_head_is_a_problem(catalog, proxies):
    p = proxies.start(catalog)
    raw = raw_exchange(p.port, b"THIS IS NOT HTTP\r\n\r\n")
    problem(parse_raw_response(raw), 400, "malformed_request")
