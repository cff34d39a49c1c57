"""Several upstreams are used in turn; upstream connections are kept alive and reused; a
reload that names other upstreams sends the next requests there."""
import signal
import threading

from conftest import echo_header, wait_until, write_ini


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


def test_a_reload_moves_traffic_to_the_new_upstreams_and_lets_the_old_finish(catalog, start_proxy,
                                                                             upstream_factory):
    old, new_a, new_b = upstream_factory(), upstream_factory(), upstream_factory()
    _, key = catalog.user_key("pro")
    p = start_proxy(catalog, upstream=old, proxy={"workers": 1})
    c = p.client()
    assert c.get("/before", key=key).echo["upstream_port"] == old.port
    slow = {}
    t = threading.Thread(target=lambda: slow.update(r=p.get("/slow/800", key=key)))
    t.start()
    assert wait_until(lambda: old.stats()["requests"] >= 2, 5, interval=0.02)   # /slow is at old
    p.ini["proxy"]["upstream"] = "%s,%s" % (new_a.url, new_b.url)
    write_ini(p.ini_path, p.ini)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: c.get("/probe", key=key).echo["upstream_port"] != old.port, 5, interval=0.05)
    seen = [c.get("/after/%d" % i, key=key).echo["upstream_port"] for i in range(10)]
    assert sorted(set(seen)) == sorted([new_a.port, new_b.port]), seen
    t.join(10)
    assert slow["r"].status == 200 and slow["r"].echo["upstream_port"] == old.port, slow
    # and a second reload, back to the first upstream, while the handles of two lists have come and gone
    p.ini["proxy"]["upstream"] = old.url
    write_ini(p.ini_path, p.ini)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: c.get("/back", key=key).echo["upstream_port"] == old.port, 5, interval=0.05)
    c.close()
