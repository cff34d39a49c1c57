"""What a client sees: the RateLimit headers on allowed requests, in each style."""
import time

from conftest import parse_sf_list, ratelimit_headers


def test_draft_headers(catalog, start_proxy):
    catalog.plan("five", "--rate", "5/10s")
    _, key = catalog.user_key("five")
    p = start_proxy(catalog, limits={"headers": "draft"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert r.header("RateLimit-Limit") == "5", r
    assert r.header("RateLimit-Remaining") == "4", r
    assert r.header("RateLimit-Policy") == "5;w=10", r
    reset = r.header("RateLimit-Reset")
    assert reset is not None and reset.isdigit() and 0 <= int(reset) <= 10, r
    assert not r.has_header("X-RateLimit-Limit") and not r.has_header("RateLimit"), r
    r = p.get("/h", key=key)
    assert r.header("RateLimit-Remaining") == "3", r


def test_draft_policy_per_minute(catalog, start_proxy):
    # rate only (the default plans also have a concurrency limit, which may be the one
    # closest to running out)
    catalog.plan("hundred", "--rate", "100/min")
    _, key = catalog.user_key("hundred")
    p = start_proxy(catalog, limits={"headers": "draft"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert r.header("RateLimit-Policy") == "100;w=60", r
    assert r.header("RateLimit-Limit") == "100", r
    assert r.header("RateLimit-Remaining") == "99", r


def test_default_style_is_ietf(catalog, start_proxy):
    # SPEC "Clients as they are": draft-ietf-httpapi-ratelimit-headers-11 unless the file
    # asks for an older style
    catalog.plan("hundred", "--rate", "100/min")
    _, key = catalog.user_key("hundred")
    p = start_proxy(catalog)
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert r.header("RateLimit-Policy") == '"hundred-1min";q=100;w=60', r
    items = parse_sf_list(r.header("RateLimit"))
    assert [(n, params["r"]) for n, params in items] == [("hundred-1min", 99)], r
    assert not r.has_header("RateLimit-Limit") and not r.has_header("X-RateLimit-Limit"), r


def test_draft_describes_the_limit_closest_to_running_out(catalog, start_proxy):
    catalog.plan("two", "--rate", "100/min")
    catalog.limit("two", "--rate", "3/10s")
    _, key = catalog.user_key("two")
    p = start_proxy(catalog, limits={"headers": "draft"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert r.header("RateLimit-Limit") == "3", r
    assert r.header("RateLimit-Remaining") == "2", r
    assert r.header("RateLimit-Policy") == "3;w=10", r


def test_ietf_headers(catalog, start_proxy):
    catalog.plan("gold", "--rate", "5/10s")
    _, key = catalog.user_key("gold")
    p = start_proxy(catalog, limits={"headers": "ietf"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    # items are named after plan and window (SPEC additions of 2026-11-25)
    assert r.header("RateLimit-Policy") == '"gold-10s";q=5;w=10', r
    items = parse_sf_list(r.header("RateLimit"))
    assert len(items) == 1 and items[0][0] == "gold-10s", r
    assert items[0][1]["r"] == 4, r
    assert 0 <= items[0][1]["t"] <= 10, r
    assert not r.has_header("RateLimit-Limit") and not r.has_header("X-RateLimit-Limit"), r


def test_ietf_lists_every_limit_and_names_concurrency(catalog, start_proxy):
    # the default free plan: 100/min and concurrency 10
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, limits={"headers": "ietf"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    policy = parse_sf_list(r.header("RateLimit-Policy"))
    state = dict(parse_sf_list(r.header("RateLimit")))
    names = [n for n, _ in policy]
    assert len(set(names)) == len(names) == 2, r
    rate = dict(policy)["free-1min"]
    assert rate["q"] == 100 and rate["w"] == 60 and "qu" not in rate, r
    conc = dict(policy)["free-concurrency"]
    assert conc["q"] == 10 and conc["qu"] == "concurrent-requests", r
    assert set(state) == set(names), r
    assert state["free-1min"]["r"] == 99, r


def test_x_headers(catalog, start_proxy):
    catalog.plan("five", "--rate", "5/10s")
    _, key = catalog.user_key("five")
    p = start_proxy(catalog, limits={"headers": "x"})
    before = int(time.time())
    r = p.get("/h", key=key)
    after = time.time()
    assert r.status == 200, r
    assert r.header("X-RateLimit-Limit") == "5", r
    assert r.header("X-RateLimit-Remaining") == "4", r
    reset = r.header("X-RateLimit-Reset")
    # a Unix time, not a delta
    assert reset is not None and reset.isdigit(), r
    assert before <= int(reset) <= after + 10 + 1, r
    assert not r.has_header("RateLimit-Limit") and not r.has_header("RateLimit-Policy"), r


def test_headers_off(catalog, start_proxy):
    catalog.plan("five", "--rate", "5/10s")
    _, key = catalog.user_key("five")
    p = start_proxy(catalog, limits={"headers": "off"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert ratelimit_headers(r) == [], r
    for _ in range(5):
        r = p.get("/h", key=key)
    # still limited, just not advertised
    assert r.status == 429, r
    assert r.header("Retry-After") is not None, r


def test_burst_adds_to_the_limit(catalog, start_proxy):
    catalog.plan("bursty", "--rate", "3/10s", "--burst", "2")
    _, key = catalog.user_key("bursty")
    p = start_proxy(catalog, limits={"headers": "draft"})
    statuses = []
    for i in range(6):
        r = p.get("/b", key=key)
        statuses.append(r.status)
        if i == 0:
            assert r.header("RateLimit-Limit") == "5", r
            assert r.header("RateLimit-Remaining") == "4", r
    assert statuses == [200] * 5 + [429], statuses
