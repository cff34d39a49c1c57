"""Issue 23: a change made with `follow = redis` reaches the following proxies as the rows it
changed, not as the whole catalog: a key created in a large catalog moves a few hundred bytes
out of Redis, not the image once per follower. A follower that cannot take the rows (it missed
a version, or they do not apply to its file) takes the whole image, as before, and ends with
the same catalog."""
import hashlib
import json
import os
import re
import signal
import time

from conftest import Catalog, wait_until
from test_fleet_catalog import (BOUND_S, PATIENCE_S, Fleet, assert_published_change, new_key,
                                seconds_until_each, served_version, wait_serving)

N_USERS = 3000


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


def redis_bytes_out(r):
    info = r.cmd("INFO", "stats")
    info = info.decode() if isinstance(info, bytes) else info
    return int(re.search(r"total_net_output_bytes:(\d+)", info).group(1))


def changed_rows_line(p, version):
    """The follower's stderr line saying it applied version's changed rows, or None."""
    for ln in p.stderr().splitlines():
        if re.search(r"\bversion %d\b.*\bchanged rows?\b" % version, ln):
            return ln
    return None


def test_a_change_travels_as_the_rows_it_changed(catalog, proxies, redis_factory, tmp_path,
                                                 record_property):
    r = redis_factory()
    fl = Fleet(proxies, catalog, r, tmp_path)
    large_catalog(catalog, tmp_path)
    probe = catalog.key("u00002")
    v0 = fl.publish(catalog)
    image_bytes = int(fl.published()["size"])
    ps = [fl.follower(), fl.follower()]
    for p in ps:
        wait_serving(p, v0, probe)
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
        before = redis_bytes_out(r)
        change()
        t0 = time.monotonic()
        version = fl.published_version()
        took = seconds_until_each(ps, lambda p: served(p) and served_version(p) == version, t0)
        record_property(what + ": s until served", json.dumps(took))
        assert all(s is not None and s <= BOUND_S for s in took.values()), \
            "%s: not served by both followers within refresh_ms + 1 s: %r" % (what, took)
        sent = redis_bytes_out(r) - before
        record_property(what + ": bytes out of Redis", sent)
        assert sent < image_bytes // 4, \
            "%s: Redis sent %d bytes to two followers; the whole catalog is %d bytes" % (
                what, sent, image_bytes)
        for p in ps:
            assert changed_rows_line(p, version), "%s: %s does not say it applied the changed rows " \
                "of version %d:\n%s" % (what, p.name, version, p.stderr()[-1500:])


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


def test_a_follower_that_missed_a_version_takes_the_whole_catalog(catalog, proxies, redis_factory, tmp_path):
    fl, p, v0, (first, second) = while_a_follower_sleeps(
        catalog, proxies, redis_factory, tmp_path,
        lambda fl: (new_key(fl, catalog, "u00001"), new_key(fl, catalog, "u00002")))
    v2 = fl.published_version()
    wait_serving(p, v2, second)
    assert p.get("/first", key=first).status == 200
    assert changed_rows_line(p, v2) is None, "%s applied rows of version %d to a file at version %d" % (
        p.name, v2, v0)


def test_rows_that_do_not_apply_give_way_to_the_whole_catalog(catalog, proxies, redis_factory, tmp_path):
    def key_and_broken_rows(fl):
        key = new_key(fl, catalog, "u00003")
        head = fl.published()
        assert "changes_sha256" in head, "no changed rows published: %r" % head
        # rows that cannot be read, with a digest that matches them (a tierctl with a bug)
        bad = b"\x12\x00not a changeset" * 8
        node = fl._node()
        node.cmd("SET", fl.catalog_key + ":changes:" + head["upload"].decode(), bad)
        node.cmd("HSET", fl.catalog_key, "changes_sha256", hashlib.sha256(bad).hexdigest(),
                 "changes_size", len(bad))
        return key
    fl, p, _, key = while_a_follower_sleeps(catalog, proxies, redis_factory, tmp_path, key_and_broken_rows)
    v1 = fl.published_version()
    wait_serving(p, v1, key)
    said = [ln for ln in p.stderr().splitlines() if "whole" in ln and "version %d" % v1 in ln]
    assert len(said) == 1, "want one line saying the rows of version %d did not apply:\n%s" % (
        v1, p.stderr()[-2000:])
    cached = json.loads(Catalog(p.db).run("export").stdout)
    assert any(k["user"] == "u00003" and k["revoked"] is None and k["id"] > 200 for k in cached["api_keys"]), \
        "the follower's file lacks the new key"
    assert wait_until(lambda: p.get("/again", key=key).status == 200, PATIENCE_S)
