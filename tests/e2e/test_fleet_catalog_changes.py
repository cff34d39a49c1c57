"""Issue 23: a change made with `follow = redis` goes to the fleet as the rows it wrote, not
as the whole catalog: a key created in a large catalog moves a few hundred bytes into and out
of Redis, not the image into Redis once and out once per follower. The image stays as the last
whole publication left it, and each version since is the rows of one change (at most 64 of
them; then the next change publishes the whole catalog again). A follower whose file is not a
version of that chain (it has a local change, or started empty) takes the image and the rows
after it; rows that do not apply are refused like a corrupt image, the old catalog kept."""
import hashlib
import json
import os
import re
import signal
import time

from conftest import Catalog, wait_until
from test_fleet_catalog import (BOUND_S, PATIENCE_S, Fleet, assert_published_change, gauge, new_key,
                                seconds_until_each, served_version, wait_serving)

N_USERS = 3000
CHAIN_MAX = 64           # versions of rows after an image (store/redis/fleet_redis.h)


def large_catalog(catalog, tmp_path, n=N_USERS):
    """A catalog of n users on plan "metered", one key each: `tierctl import` of a document."""
    doc = json.loads(catalog.run("export", "-").stdout)
    doc["plans"] = [{"id": 1, "name": "metered", "shadow": False, "limits": [
        {"id": 1, "kind": "rate", "amount": 1000, "window_ms": 60000, "burst": 0,
         "algorithm": "sliding-log"}]}]
    doc["users"], doc["api_keys"] = [], []
    for i in range(n):
        doc["users"].append({"id": "u%05d" % i, "plan": "metered", "created": "2026-01-01T00:00:00Z"})
        doc["api_keys"].append({"id": i + 1, "user": "u%05d" % i, "label": "",
                                "sha256": "%064x" % (i + 1), "created": "2026-01-01T00:00:00Z",
                                "revoked": None})
    doc["last_ids"] = {"plans": 1, "limits": 1, "api_keys": n}
    path = tmp_path / "large.json"
    path.write_text(json.dumps(doc))
    catalog.run("import", str(path))


def redis_bytes(r):
    """Bytes Redis has received and sent (INFO stats)."""
    info = r.cmd("INFO", "stats")
    info = info.decode() if isinstance(info, bytes) else info
    return sum(int(re.search(r"total_net_%s_bytes:(\d+)" % d, info).group(1)) for d in ("input", "output"))


def changed_rows_line(p, version):
    """The follower's stderr line saying it applied version's changed rows, or None."""
    for ln in p.stderr().splitlines():
        if re.search(r"\bversion %d\b.*\bchanged rows?\b" % version, ln):
            return ln
    return None


def two_followers(catalog, proxies, redis_factory, tmp_path):
    """The large catalog published in a new Redis and served by two followers: (the Redis,
    the fleet, the followers, a key of user u00002 they admit)."""
    r = redis_factory()
    fl = Fleet(proxies, catalog, r, tmp_path)
    large_catalog(catalog, tmp_path)
    key = catalog.key("u00002")
    v0 = fl.publish(catalog)
    ps = [fl.follower(), fl.follower()]
    for p in ps:
        wait_serving(p, v0, key)
    return r, fl, ps, key


def test_a_change_travels_as_the_rows_it_changed(catalog, proxies, redis_factory, tmp_path,
                                                 record_property):
    r, fl, ps, probe = two_followers(catalog, proxies, redis_factory, tmp_path)
    image_bytes = int(fl.published()["size"])
    state = {}

    def key_create():
        state["key"] = new_key(fl, catalog, "u00001")

    def key_revoke():
        assert_published_change(fl.change(catalog, "key", "revoke", str(max(catalog.key_ids("u00001")))),
                                "key revoke")

    def plan_set():
        assert_published_change(fl.change(catalog, "plan", "set", "metered", "--rate", "1/min"), "plan set")

    for what, change, served in [
            ("key create", key_create, lambda p: p.get("/c", key=state["key"]).status == 200),
            ("key revoke", key_revoke, lambda p: p.get("/r", key=state["key"]).status == 401),
            ("plan set 1/min", plan_set, lambda p: p.get("/p", key=probe).status == 429)]:
        before = redis_bytes(r)
        change()
        t0 = time.monotonic()
        version = fl.published_version()
        took = seconds_until_each(ps, lambda p: served(p) and served_version(p) == version, t0)
        record_property(what + ": s until served", json.dumps(took))
        assert all(s is not None and s <= BOUND_S for s in took.values()), \
            "%s: not served by both followers within refresh_ms + 1 s: %r" % (what, took)
        moved = redis_bytes(r) - before
        record_property(what + ": bytes into and out of Redis", moved)
        assert moved < image_bytes // 4, \
            "%s: %d bytes went into and out of Redis for a publication and two followers; the whole " \
            "catalog is %d bytes" % (what, moved, image_bytes)
        for p in ps:
            assert changed_rows_line(p, version), "%s: %s does not say it applied the changed rows " \
                "of version %d:\n%s" % (what, p.name, version, p.stderr()[-1500:])


def test_publish_sends_the_rows_in_which_the_file_differs(catalog, proxies, redis_factory, tmp_path):
    """Changes made without follow = redis (a key created, one revoked, a user added, as an
    import of an edited export would) reach the fleet with `tierctl publish` as the rows in
    which the file differs from the fleet's catalog, not as the whole catalog."""
    r, fl, ps, leaked = two_followers(catalog, proxies, redis_factory, tmp_path)
    v0, image_bytes = fl.published_version(), int(fl.published()["size"])
    key = catalog.key("u00001")
    catalog.run("key", "revoke", str(max(catalog.key_ids("u00002"))))
    catalog.run("user", "add", "newcomer", "--plan", "metered")
    assert fl.published_version() == v0, "a change without follow = redis was published"
    before = redis_bytes(r)
    cp = fl.ctl(catalog, "publish")
    assert cp.returncode == 0, cp.stderr
    v1 = fl.published_version()
    assert v1 == v0 + 1 and re.search(r"\brows\b", cp.stderr), cp.stderr
    for p in ps:
        wait_serving(p, v1, key)
        assert p.get("/leaked", key=leaked).status == 401, "%s still admits the revoked key" % p.name
        assert changed_rows_line(p, v1), "%s does not say it applied the changed rows of version %d:\n%s" % (
            p.name, v1, p.stderr()[-1500:])
    # tierctl reads the fleet's catalog once to compare; nothing else moves the whole of it
    moved = redis_bytes(r) - before
    assert moved < image_bytes * 5 // 4, \
        "%d bytes went into and out of Redis for a publication and two followers; the whole catalog " \
        "is %d bytes" % (moved, image_bytes)
    assert "newcomer" in fl.published_users()


def test_publish_of_the_fleets_own_catalog_publishes_nothing(catalog, proxies, redis_factory, tmp_path):
    fl = Fleet(proxies, catalog, redis_factory(), tmp_path)
    large_catalog(catalog, tmp_path, n=50)
    v0 = fl.publish(catalog)
    catalog.run("user", "add", "passing", "--plan", "metered")
    catalog.run("user", "remove", "passing")
    cp = fl.ctl(catalog, "publish")
    assert cp.returncode == 0 and re.search(r"nothing to publish", cp.stderr), cp.stderr
    assert fl.published_version() == v0
    st = fl.status(catalog)
    assert (st["local"]["version"], st["local"]["changed"]) == (v0, False), st


def while_a_follower_sleeps(catalog, proxies, redis_factory, tmp_path, what):
    """A fleet of 200 users with one follower serving it; `what(fleet)` runs while the
    follower is stopped (SIGSTOP), and its result is returned once it runs again."""
    fl = Fleet(proxies, catalog, redis_factory(), tmp_path)
    large_catalog(catalog, tmp_path, n=200)
    v0 = fl.publish(catalog)
    p = fl.follower()
    wait_serving(p, v0)
    os.kill(p.proc.pid, signal.SIGSTOP)
    try:
        return fl, p, v0, what(fl)
    finally:
        os.kill(p.proc.pid, signal.SIGCONT)


def test_a_follower_that_missed_versions_takes_the_rows_of_each(catalog, proxies, redis_factory, tmp_path):
    fl, p, v0, (first, second) = while_a_follower_sleeps(
        catalog, proxies, redis_factory, tmp_path,
        lambda fl: (new_key(fl, catalog, "u00001"), new_key(fl, catalog, "u00002")))
    v2 = fl.published_version()
    wait_serving(p, v2, second)
    assert p.get("/first", key=first).status == 200
    line = changed_rows_line(p, v2)
    assert line and "2 versions" in line, "%s did not take the rows of the two versions it missed:\n%s" % (
        p.name, p.stderr()[-1500:])


def test_a_follower_with_a_local_change_takes_the_image_and_the_rows_since(catalog, proxies, redis_factory,
                                                                            tmp_path):
    fl, p, v0, key = while_a_follower_sleeps(catalog, proxies, redis_factory, tmp_path,
                                             lambda fl: new_key(fl, catalog, "u00004"))
    v1 = fl.published_version()
    assert int(fl.published()["image_version"]) == v0, fl.published()
    wait_serving(p, v1, key)
    local = Catalog(p.db)
    local.run("user", "add", "only-here", "--plan", "metered")
    key2 = new_key(fl, catalog, "u00005")
    v2 = fl.published_version()
    wait_serving(p, v2, key2)
    assert re.search(r"version %d .*installed in .*version %d's image and the rows of 2 versions" % (v2, v0),
                     p.stderr()), p.stderr()[-2000:]
    users = {u["id"] for u in json.loads(local.run("export").stdout)["users"]}
    assert "only-here" not in users and len(users) == 200, "the follower's file is not the fleet's"


def test_rows_that_do_not_apply_are_refused_and_the_old_catalog_kept(catalog, proxies, redis_factory, tmp_path):
    def key_and_broken_rows(fl):
        key = new_key(fl, catalog, "u00003")
        version = fl.published_version()
        # rows that cannot be read, with a digest that matches them (a tierctl with a bug)
        bad = b"\x12\x00not a changeset" * 8
        fl._node().cmd("HSET", fl.catalog_key + ":rows", str(version), bad,
                       "%d:sha256" % version, hashlib.sha256(bad).hexdigest())
        return key
    fl, p, v0, key = while_a_follower_sleeps(catalog, proxies, redis_factory, tmp_path, key_and_broken_rows)
    v1 = fl.published_version()
    refused = lambda: gauge(p, "tierproxy_catalog_refused_total") or 0     # noqa: E731
    assert wait_until(lambda: refused() == 1, PATIENCE_S), (refused(), p.stderr()[-2000:])
    said = [ln for ln in p.stderr().splitlines() if "refused" in ln and "version %d" % v1 in ln]
    assert len(said) == 1, "want one line saying version %d was refused:\n%s" % (v1, p.stderr()[-2000:])
    assert served_version(p) == v0 and p.get("/not-yet", key=key).status == 401
    time.sleep(1.0)
    assert refused() == 1, "a refused version was counted again"
    # a whole publication (tierctl publish) brings the fleet back to one catalog
    v2 = fl.publish(catalog)
    wait_serving(p, v2, key)


def test_a_full_chain_publishes_the_whole_catalog_again(catalog, proxies, redis_factory, tmp_path):
    fl = Fleet(proxies, catalog, redis_factory(), tmp_path)
    large_catalog(catalog, tmp_path, n=100)
    v0 = fl.publish(catalog)
    for i in range(CHAIN_MAX):
        new_key(fl, catalog, "u%05d" % i)
        head = fl.published()
        assert int(head["image_version"]) == v0, "change %d published the whole catalog: %r" % (i + 1, head)
    new_key(fl, catalog, "u00099")
    head = fl.published()
    assert int(head["version"]) == v0 + CHAIN_MAX + 1 and "image_version" not in head, \
        "the change after %d rows did not publish the whole catalog: %r" % (CHAIN_MAX, head)
    assert fl._node().cmd("EXISTS", fl.catalog_key + ":rows") == 0, "the rows of the old chain stayed"
    p = fl.follower()
    wait_serving(p, v0 + CHAIN_MAX + 1)
