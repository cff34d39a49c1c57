"""The admin listener: /health and /metrics."""
import re

from conftest import wait_until


def test_health_ok(catalog, start_proxy):
    p = start_proxy(catalog)
    # a worker serves after STORE_WAIT_MS even if its Redis connection is not up yet: on a
    # loaded box the first /health may come before it
    wait_until(lambda: p.admin("/health").json().get("store") == "ok", 10)
    r = p.admin("/health")
    assert r.status == 200, r
    assert r.json() == {"status": "ok", "store": "ok", "plans": "ok", "catalog_version": 0}, r
    assert (r.header("Content-Type") or "").startswith("application/json"), r


def store_is_ok(p):
    r = p.admin("/health")
    return r.status == 200 and r.json().get("store") == "ok"


def test_health_names_a_dead_store(catalog, proxies, redis_factory):
    """Redis gone under the default on_store_error (local): requests are decided in the
    proxy's memory, so /health stays 200 ("degraded", what decides, and the reason)."""
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd)
    # on the store once connected: on a loaded box the proxy may start serving
    # (STORE_WAIT_MS) before its Redis connection is up
    assert wait_until(lambda: store_is_ok(p), 10), p.admin("/health")
    rd.stop()

    def unhealthy():
        r = p.admin("/health")
        return r if r.json().get("store") != "ok" else None
    r = wait_until(unhealthy, 10, interval=0.2)
    assert r, "/health still says store ok with Redis gone"
    body = r.json()
    assert r.status == 200 and body.get("status") == "degraded" and body.get("store") == "local", (r, body)
    assert "127.0.0.1:%d" % rd.port in body.get("store_error", ""), body
    assert body.get("plans") == "ok", body


def test_health_names_an_unreachable_catalog(catalog, start_proxy):
    # the catalog is made unreachable by an exclusive lock (rollback journal, see
    # test_catalog.py): every refresh poll fails, while requests are still served
    from test_catalog import lock_catalog, use_rollback_journal
    _, key = catalog.user_key("free")
    use_rollback_journal(catalog.path)
    p = start_proxy(catalog, plans={"refresh_ms": 100})
    # the Redis connection may come up just after the proxy starts serving
    assert wait_until(lambda: p.admin("/health").json().get("status") == "ok", 10), p.admin("/health")
    db = lock_catalog(catalog.path)
    try:
        def unhealthy():
            r = p.admin("/health")
            return r if r.json().get("plans") != "ok" else None
        r = wait_until(unhealthy, 8, interval=0.1)
        assert r, "/health still says plans ok 8 s after the catalog was locked"
        body = r.json()
        # the catalog held still serves: 200, degraded (SPEC "Day two": 503 only without one)
        assert r.status == 200 and body.get("status") == "degraded", (r, body)
        assert body.get("plans") == "unreachable", body
        assert body.get("store") == "ok", body
        assert p.get("/x", key=key).status == 200
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert wait_until(lambda: p.admin("/health").json().get("status") == "ok", 5, interval=0.1), \
        "/health did not recover after the catalog lock was released"


def test_metrics(catalog, start_proxy):
    catalog.plan("one", "--rate", "1/min")
    _, key = catalog.user_key("one")
    p = start_proxy(catalog)
    assert p.get("/m", key=key).status == 200
    assert p.get("/m", key=key).status == 429
    assert p.get("/m").status == 401
    state = {}

    def scrape():
        r = p.admin("/metrics")
        assert r.status == 200, r
        assert (r.header("Content-Type") or "").startswith("text/plain"), r
        state["text"] = r.body.decode()
        return state["text"]

    def sample(name, **labels):
        text = state["text"]
        for ln in text.splitlines():
            if ln.startswith("#") or not ln.startswith(name):
                continue
            m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)", ln)
            if not m or m.group(1) != name:
                continue
            got = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if all(got.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        return None
    # a request is counted when it completes, which may be a moment after its answer
    # reached the client: scrape until both are in
    scrape()
    wait_until(lambda: scrape() and
               sample("tierproxy_requests_total", plan="one", code="429") == 1 and
               sample("tierproxy_requests_total", plan="one", code="200") == 1, 5, interval=0.1)
    text = state["text"]
    assert sample("tierproxy_requests_total", plan="one", code="200") == 1, text
    assert sample("tierproxy_requests_total", plan="one", code="429") == 1, text
    assert sample("tierproxy_rate_limit_hits_total", limit_type="http", plan="one") == 1, text
    assert sample("tierproxy_store_errors_total") is not None, text
    for hist in ("tierproxy_store_seconds", "tierproxy_upstream_seconds"):
        assert sample(hist + "_bucket") is not None, hist
        assert sample(hist + "_count") is not None, hist
        assert sample(hist + "_sum") is not None, hist
    assert sample("tierproxy_connections") is not None, text
    assert sample("tierproxy_websockets") is not None, text
