"""Concurrency leases on a Redis Cluster (issue 14): requests in flight and open WebSockets
of users whose slots three different masters serve, counted fleet-wide by two proxies in
redis_mode = cluster; each proxy renews the leases it holds with one call per master."""
import itertools
import json
import signal
import time

from conftest import SLOW, wait_until
from fleet_helpers import (WS, check_concurrency_429, parallel_ws, wait_stat, ws_connect, ws_try,
                           ws_upstream)  # noqa: F401
from test_concurrency import check_sigterm_cut_requests_give_back, race

_prefix_n = itertools.count()


def cluster_fleet(proxies, catalog, cluster, upstream, **limits):
    prefix = "cl%d_%d:" % (next(_prefix_n), int(time.time() * 1000) % 100000)
    limits = dict(limits, redis_mode="cluster")
    return [proxies.start(catalog, store="redis", redis=cluster, key_prefix=prefix, upstream=upstream,
                          limits=limits) for _ in range(2)]


def users_on_each_master(catalog, cluster, plan, tag, per_master=1):
    """per_master new users of plan per master (subject "u:<id>" served there):
    [(port, user, key)]."""
    spread = cluster.names_on_each_master(lambda i: "u:%s%d" % (tag, i), per_master=per_master)
    out = []
    for port, names in sorted(spread.items()):
        assert len(names) >= per_master, spread
        for name in names[:per_master]:
            user_id = name[len("u:"):]
            catalog.user(plan, user_id)
            out.append((port, user_id, catalog.key(user_id)))
    assert len(out) == 3 * per_master, spread
    return out


def test_concurrency_race_on_every_master_two_proxies_limit_10(catalog, proxies, redis_cluster, ws_upstream):
    catalog.plan("crace", "--rate", "1000000/min", "--concurrency", "10")
    users = users_on_each_master(catalog, redis_cluster, "crace", "r")
    a, b = cluster_fleet(proxies, catalog, redis_cluster, ws_upstream)
    hold = int(800 * SLOW)
    for port, user, key in users:
        st = race([a.port, b.port], key, 200, hold)
        stats = ws_upstream.stats()
        most = stats["max_open"].get(user, 0)
        assert most <= 10, "user on master :%d: the upstream saw %d requests open at once (limit 10); " \
            "answers %r" % (port, most, st)
        assert st.get(200, 0) >= 10, "user on master :%d: too few admitted: %r" % (port, st)
        assert stats["open"].get(user, 0) == 0
        print("master :%d: answers %r, upstream max open %d" % (port, st, most))


def test_websockets_on_every_master_outlive_the_lease_ttl(catalog, proxies, redis_cluster, ws_upstream):
    catalog.plan("cws2", "--rate", "100000/min", "--concurrency", "2")
    # two users per master: each proxy's renewal call to a master covers keys of two slots
    # (declared KEYS of two slots would be CROSSSLOT)
    users = users_on_each_master(catalog, redis_cluster, "cws2", "w", per_master=2)
    assert all(redis_cluster.keyslot("u:" + users[i][1]) != redis_cluster.keyslot("u:" + users[i + 1][1])
               for i in (0, 2, 4))
    ttl_ms = 800
    a, b = cluster_fleet(proxies, catalog, redis_cluster, ws_upstream, lease_ttl_ms=ttl_ms)
    held = []
    try:
        for _, _, key in users:
            held += [ws_connect(a.port, "/ws", key=key), ws_connect(b.port, "/ws", key=key)]
        # several TTLs: only renewal (one call per master per proxy) keeps the slots counted
        time.sleep(4 * ttl_ms / 1000.0)
        for port, user, key in users:
            for p in (a, b):
                r = ws_try(p.port, "/ws", key)
                if isinstance(r, WS):
                    r.close()
                    raise AssertionError("user %s (master :%d): a third WebSocket opened after %d ms, "
                                         "limit 2: the leases were not renewed" % (user, port, 4 * ttl_ms))
                check_concurrency_429(r)
        for w in held:
            w.send_text("alive")
            assert w.recv_message()[1] == b"alive"
    finally:
        for w in held:
            w.close()
    # closed: the slots are back on every master
    for _, _, key in users:
        got = []
        try:
            for port in (a.port, b.port):
                r = ws_try(port, "/ws", key)
                assert isinstance(r, WS), r
                got.append(r)
        finally:
            for w in got:
                w.close()


def test_20_websockets_limit_5_two_proxies_on_every_master(catalog, proxies, redis_cluster, ws_upstream):
    catalog.plan("cws5", "--rate", "100000/min", "--concurrency", "5")
    users = users_on_each_master(catalog, redis_cluster, "cws5", "f")
    a, b = cluster_fleet(proxies, catalog, redis_cluster, ws_upstream)
    for port, user, key in users:
        res = parallel_ws([((a, b)[i % 2].port, "/ws", key) for i in range(20)])
        opened = [r for r in res if isinstance(r, WS)]
        try:
            assert len(opened) == 5, "user on master :%d: %d of 20 opened (limit 5)" % (port, len(opened))
            for r in res:
                if not isinstance(r, WS):
                    check_concurrency_429(r)
            assert wait_stat(ws_upstream, "ws_open", user, 5) == 5
        finally:
            for w in opened:
                w.close()


def test_websockets_held_across_a_failover_still_count(catalog, proxies, redis_cluster_factory, ws_upstream):
    """Leases a dead master held are renewed on its promoted replica: the slots of
    WebSockets open across the failover still count long after the lease TTL."""
    c = redis_cluster_factory()
    catalog.plan("cwsfo", "--rate", "100000/min", "--concurrency", "2")
    victim = c.masters()[0]
    (_, user, key), = [u for u in users_on_each_master(catalog, c, "cwsfo", "k") if u[0] == victim.port]
    # renewals every third of the TTL: a sanitizer build on a loaded box can miss a short one
    ttl_ms = int(1500 * SLOW)
    a, b = cluster_fleet(proxies, catalog, c, ws_upstream, lease_ttl_ms=ttl_ms)
    held = [ws_connect(a.port, "/ws", key=key), ws_connect(b.port, "/ws", key=key)]
    try:
        check_concurrency_429(ws_try(a.port, "/ws", key))
        victim.kill()
        took = c.wait_failover(victim)
        # well past the TTL on the new master: only a renewal there keeps the two slots
        time.sleep(3 * ttl_ms / 1000.0)
        for p in (a, b):
            r = ws_try(p.port, "/ws", key)
            if isinstance(r, WS):
                r.close()
                raise AssertionError("a third WebSocket opened %.1f s after the failover (limit 2): the "
                                     "leases held on the dead master were not renewed on its replica" % took)
            check_concurrency_429(r)
        for w in held:
            w.send_text("alive")
            assert w.recv_message()[1] == b"alive"
    finally:
        for w in held:
            w.close()


def test_sigterm_gives_the_slots_back_on_every_master_at_once(catalog, proxies, redis_cluster, ws_upstream):
    """SIGTERM: a proxy gives back every lease it holds on every master (one release call per
    master) before it exits, long before the lease TTL."""
    catalog.plan("cwsterm", "--rate", "100000/min", "--concurrency", "2")
    users = users_on_each_master(catalog, redis_cluster, "cwsterm", "t")
    ttl_ms = 20000
    a, b = cluster_fleet(proxies, catalog, redis_cluster, ws_upstream, lease_ttl_ms=ttl_ms)
    on_a = [ws_connect(a.port, "/ws", key=key) for _, _, key in users]
    on_b = [ws_connect(b.port, "/ws", key=key) for _, _, key in users]
    extra = []
    try:
        for _, _, key in users:
            check_concurrency_429(ws_try(b.port, "/ws", key))
        t0 = time.monotonic()
        a.signal(signal.SIGTERM)
        for w in on_a:
            assert w.wait_eof(10 * SLOW), "a tunnel of the stopped proxy stayed open"
        a.proc.wait(15 * SLOW)
        assert a.proc.returncode == 0, a.stderr()[-2000:]
        for port, user, key in users:
            r = ws_try(b.port, "/ws", key)
            assert isinstance(r, WS), "user %s (master :%d): the slot held on the stopped proxy is not " \
                "back %.1f s after SIGTERM (lease_ttl_ms %d): %r" % (user, port, time.monotonic() - t0, ttl_ms, r)
            extra.append(r)
            check_concurrency_429(ws_try(b.port, "/ws", key))
    finally:
        for w in on_a + on_b + extra:
            w.close()


def test_a_slot_given_back_during_a_failover_is_free_after_it(catalog, proxies, redis_cluster_factory,
                                                             ws_upstream):
    """A WebSocket closed while its master is dead: the release cannot reach the dead node;
    once the replica serves, the slot is free there at once, not at the lease TTL."""
    c = redis_cluster_factory()
    catalog.plan("cwsrel", "--rate", "100000/min", "--concurrency", "2")
    victim = c.masters()[0]
    (_, user, key), = [u for u in users_on_each_master(catalog, c, "cwsrel", "g") if u[0] == victim.port]
    ttl_ms = 30000
    a, b = cluster_fleet(proxies, catalog, c, ws_upstream, lease_ttl_ms=ttl_ms)
    held = [ws_connect(a.port, "/ws", key=key), ws_connect(b.port, "/ws", key=key)]
    extra = []
    try:
        check_concurrency_429(ws_try(a.port, "/ws", key))
        victim.kill()
        time.sleep(0.5)          # the proxies have seen their connection to it go
        held[0].close()          # its release is held back by proxy a
        c.wait_failover(victim)
        # both proxies follow the new map: every master they know answers (until then a
        # proxy decides the victim's users locally)
        for p in (a, b):
            assert wait_until(lambda: json.loads(p.admin("/health").body).get("store") == "ok", 10), \
                p.admin("/health").body
        t0 = time.monotonic()
        r = ws_try(a.port, "/ws", key)
        assert isinstance(r, WS), "the slot given back during the failover still counts %.1f s after the " \
            "promotion (lease_ttl_ms %d): %r" % (time.monotonic() - t0, ttl_ms, r)
        extra.append(r)
        check_concurrency_429(ws_try(b.port, "/ws", key))
    finally:
        for w in held + extra:
            w.close()


def test_sigterm_gives_back_the_slots_of_requests_cut_at_the_drain_deadline(catalog, proxies, redis_cluster,
                                                                           ws_upstream):
    """SIGTERM while requests outlive the drain (the upstream never answers), one user on each
    master: what the proxy still holds at the drain deadline goes back on every master (one
    release call per master) before it exits, long before the lease TTL. Those requests are
    cut, not ended: no release of their own gives the slots back."""
    catalog.plan("cdrain", "--rate", "100000/min", "--concurrency", "1")
    users = users_on_each_master(catalog, redis_cluster, "cdrain", "d")
    a, b = cluster_fleet(proxies, catalog, redis_cluster, ws_upstream, lease_ttl_ms=120000)
    check_sigterm_cut_requests_give_back(
        a, b, [("user %s (master :%d): " % (user, port), user, key) for port, user, key in users], ws_upstream)
