"""tierctl changes take effect within refresh_ms without a restart, and serving runs no
SQL: the proxy answers from its in-memory copy even while the catalog is locked."""
import sqlite3
import time

import pytest

from conftest import echo_header, parse_sf_list, wait_until

REFRESH_MS = 300
DEADLINE_S = REFRESH_MS / 1000.0 + 1.0


def policy(r):
    """The ietf RateLimit-Policy items of r as {name: q}."""
    return {name: params.get("q") for name, params in parse_sf_list(r.header("RateLimit-Policy") or "")}


def within_deadline(pred, started):
    """pred() holds before `started` + refresh_ms + 1 s (checked until then)."""
    left = started + DEADLINE_S - time.monotonic()
    return wait_until(pred, max(0.0, left), interval=0.05)


def test_new_key_takes_effect(catalog, start_proxy):
    user, key = catalog.user_key("free")
    p = start_proxy(catalog, plans={"refresh_ms": REFRESH_MS})
    assert p.get("/x", key=key).status == 200
    t0 = time.monotonic()
    new = catalog.key(user)
    assert within_deadline(lambda: p.get("/x", key=new).status == 200, t0), \
        "a new key was not accepted within refresh_ms + 1 s"
    # and a new user's key too
    t0 = time.monotonic()
    _, other = catalog.user_key("starter")
    assert within_deadline(lambda: p.get("/x", key=other).status == 200, t0)


def test_revoked_key_takes_effect(catalog, start_proxy):
    user, key = catalog.user_key("free")
    p = start_proxy(catalog, plans={"refresh_ms": REFRESH_MS})
    assert p.get("/x", key=key).status == 200
    ids = catalog.key_ids(user)
    assert len(ids) == 1, ids
    t0 = time.monotonic()
    catalog.run("key", "revoke", ids[0])
    assert within_deadline(lambda: p.get("/x", key=key).status == 401, t0), \
        "a revoked key still worked refresh_ms + 1 s later"


def test_removed_user_takes_effect(catalog, start_proxy):
    user, key = catalog.user_key("free")
    p = start_proxy(catalog, plans={"refresh_ms": REFRESH_MS})
    assert p.get("/x", key=key).status == 200
    t0 = time.monotonic()
    catalog.run("user", "remove", user)
    assert within_deadline(lambda: p.get("/x", key=key).status == 401, t0)


def test_plan_change_takes_effect(catalog, start_proxy):
    catalog.plan("small", "--rate", "50/min")
    catalog.plan("large", "--rate", "777/min")
    user, key = catalog.user_key("small")
    p = start_proxy(catalog, plans={"refresh_ms": REFRESH_MS})
    r = p.get("/x", key=key)
    assert echo_header(r.echo, "X-Tier-Plan") == ["small"]
    assert policy(r) == {"small-1min": 50}, r
    t0 = time.monotonic()
    catalog.run("user", "set", user, "--plan", "large")

    def on_pro():
        r = p.get("/x", key=key)
        return r.status == 200 and echo_header(r.echo, "X-Tier-Plan") == ["large"] \
            and policy(r) == {"large-1min": 777}
    assert within_deadline(on_pro, t0), "user set --plan not in effect within refresh_ms + 1 s"


def test_limit_change_takes_effect(catalog, start_proxy):
    catalog.plan("changing", "--rate", "50/min")
    _, key = catalog.user_key("changing")
    p = start_proxy(catalog, plans={"refresh_ms": REFRESH_MS})
    assert policy(p.get("/x", key=key)) == {"changing-1min": 50}
    t0 = time.monotonic()
    catalog.run("plan", "set", "changing", "--rate", "70/min")
    assert within_deadline(lambda: policy(p.get("/x", key=key)) == {"changing-1min": 70}, t0)


def use_rollback_journal(path):
    """Switches the catalog from WAL to a rollback journal. In WAL mode every open
    connection (the proxy's watcher keeps one for PRAGMA data_version) holds a shared lock
    on the file, so no one can take an exclusive lock; with a rollback journal an idle
    connection holds none, and an exclusive lock really shuts every reader out."""
    db = sqlite3.connect(str(path), isolation_level=None)
    assert db.execute("PRAGMA journal_mode=DELETE").fetchone()[0] == "delete"
    db.close()


def lock_catalog(path):
    """Takes an exclusive lock on the catalog and keeps it: returns the connection. Waits
    (busy timeout) for a refresh poll that happens to be reading at that moment."""
    db = sqlite3.connect(str(path), isolation_level=None, timeout=10)
    db.execute("PRAGMA locking_mode=EXCLUSIVE")
    db.execute("BEGIN EXCLUSIVE")
    # write something so the lock is really taken (and the change is never committed)
    db.execute("CREATE TABLE e2e_lock_probe (x)")
    db.execute("INSERT INTO e2e_lock_probe VALUES (1)")
    return db


def test_serving_runs_no_sql(catalog, start_proxy):
    catalog.plan("silver", "--rate", "100/min")
    users = [catalog.user_key(plan) for plan in ("free", "silver", "pro")]
    use_rollback_journal(catalog.path)
    p = start_proxy(catalog, plans={"refresh_ms": 100})
    for _, key in users:
        assert p.get("/warm", key=key).status == 200
    db = lock_catalog(catalog.path)
    try:
        # prove the lock: any other connection cannot even read now
        other = sqlite3.connect(str(catalog.path), timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            other.execute("SELECT count(*) FROM sqlite_master").fetchall()
        other.close()
        time.sleep(0.5)  # several refresh polls fail meanwhile; serving must not care
        for rounds in range(3):
            for (user, key), plan in zip(users, ("free", "silver", "pro")):
                r = p.get("/locked", key=key, timeout=10)
                assert r.status == 200, r
                assert echo_header(r.echo, "X-Tier-Plan") == [plan]
                assert echo_header(r.echo, "X-Tier-User") == [user]
            r = p.get("/locked", key="unknown-key-while-locked-000000000")
            assert r.status == 401, r
    finally:
        db.execute("ROLLBACK")
        db.close()
    # and after the lock goes, changes are picked up again
    t0 = time.monotonic()
    _, key = catalog.user_key("free")
    assert within_deadline(lambda: p.get("/x", key=key).status == 200, t0)
