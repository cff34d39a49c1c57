"""Several upstreams are used in turn; upstream connections are kept alive and reused."""
from conftest import echo_header


def test_several_upstreams_used_in_turn(catalog, start_proxy, upstream_factory):
    ups = [upstream_factory(), upstream_factory()]
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, upstreams=ups)
    seen = []
    for i in range(20):
        r = p.get("/turn/%d" % i, key=key)
        assert r.status == 200, r
        seen.append(r.echo["upstream_port"])
    counts = [seen.count(u.port) for u in ups]
    assert sum(counts) == 20, seen
    # both see traffic, and neither is starved ("in turn")
    assert min(counts) >= 5, counts
    stats = [u.stats()["requests"] for u in ups]
    assert stats == counts, (stats, counts)


def test_upstream_keep_alive_reused(catalog, start_proxy, upstream_factory):
    up = upstream_factory()
    _, key = catalog.user_key("pro")
    p = start_proxy(catalog, upstream=up)
    c = p.client()
    n = 60
    for i in range(n):
        r = c.get("/ka/%d" % i, key=key)
        assert r.status == 200, r
        assert echo_header(r.echo, "Connection") in ([], ["keep-alive"]), r.echo["headers"]
    c.close()
    # also over fresh client connections: the upstream side is pooled independently
    for i in range(20):
        assert p.get("/ka-fresh/%d" % i, key=key).status == 200
    st = up.stats()
    assert st["requests"] == n + 20
    assert st["connections"] <= 10, \
        "%d upstream connections for %d requests: keep-alive not reused" % (
            st["connections"], st["requests"])
