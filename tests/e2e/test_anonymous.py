"""What a client sees without a key when anonymous_plan is set: limits per client IP;
X-Forwarded-For believed only from trusted_proxies. And exempt_paths."""
from conftest import assert_json_error, echo_header, ratelimit_headers


def test_anonymous_plan_limits_per_client_ip(catalog, start_proxy):
    catalog.plan("anon", "--rate", "2/30s")
    p = start_proxy(catalog, auth={"anonymous_plan": "anon"})
    # 127.0.0.1 and 127.0.0.2 are two clients (Linux answers all of 127/8 on lo)
    a = [p.get("/anon", source="127.0.0.1") for _ in range(3)]
    assert [r.status for r in a] == [200, 200, 429], a
    assert echo_header(a[0].echo, "X-Tier-Plan") == ["anon"], a[0].echo["headers"]
    assert_json_error(a[2], 429)
    b = [p.get("/anon", source="127.0.0.2") for _ in range(3)]
    assert [r.status for r in b] == [200, 200, 429], b


def test_anonymous_plan_does_not_accept_bad_keys(catalog, start_proxy):
    catalog.plan("anon", "--rate", "100/min")
    p = start_proxy(catalog, auth={"anonymous_plan": "anon"})
    r = p.get("/x", key="not-a-real-key-0000000000000000")
    assert_json_error(r, 401, {"error_code": "invalid_api_key"})


def test_untrusted_x_forwarded_for_is_ignored(catalog, start_proxy):
    catalog.plan("anon", "--rate", "2/30s")
    p = start_proxy(catalog, auth={"anonymous_plan": "anon"},
                    proxy={"trusted_proxies": "127.0.0.3/32"})
    # a client that is not a trusted proxy cannot get fresh limits by inventing addresses
    statuses = [p.get("/x", source="127.0.0.1",
                      headers=[("X-Forwarded-For", "198.51.100.%d" % i)]).status
                for i in range(1, 4)]
    assert statuses == [200, 200, 429], statuses


def test_trusted_proxy_x_forwarded_for_is_the_client(catalog, start_proxy):
    catalog.plan("anon", "--rate", "2/30s")
    p = start_proxy(catalog, auth={"anonymous_plan": "anon"},
                    proxy={"trusted_proxies": "127.0.0.3/32"})

    def via_lb(xff):
        return p.get("/x", source="127.0.0.3", headers=[("X-Forwarded-For", xff)])
    # the client is the address the trusted proxy appended: counted per that address
    s1 = [via_lb("192.0.2.1, 203.0.113.7").status, via_lb("192.0.2.2, 203.0.113.7").status,
          via_lb("203.0.113.7").status]
    assert s1 == [200, 200, 429], s1
    # another client behind the same load balancer has its own limit
    r = via_lb("203.0.113.8")
    assert r.status == 200, r
    # and the upstream sees the chain with the load balancer appended
    xff = echo_header(r.echo, "X-Forwarded-For")
    assert len(xff) == 1, r.echo["headers"]
    assert [h.strip() for h in xff[0].split(",")] == ["203.0.113.8", "127.0.0.3"], xff


def test_exempt_paths_forwarded_without_key_or_limits(catalog, start_proxy):
    catalog.plan("one", "--rate", "1/min")
    _, key = catalog.user_key("one")
    p = start_proxy(catalog, proxy={"exempt_paths": "/public,/healthz"})
    for _ in range(5):
        r = p.get("/public/page?x=1")
        assert r.status == 200, r
        assert r.echo["path"] == "/public/page?x=1"
        assert ratelimit_headers(r) == [], r
    assert p.get("/healthz").status == 200
    # keyed requests on an exempt path are not counted either
    for _ in range(3):
        assert p.get("/public/x", key=key).status == 200
    assert p.get("/private", key=key).status == 200
    assert p.get("/private", key=key).status == 429
    assert_json_error(p.get("/private"), 401, {"error_code": "missing_api_key"})
