"""tierctl in an operator's first hour (SPEC.md, "Additions of 2026-11-25", "Operator's
first hour"): `key create` that a shell can capture, --version and --help, one line on
stderr for every change and none for a read, `limit set`, limits that keep their identity
(and the users' counters) when changed by `limit set` or `plan set`, `backup FILE` of a
live catalog, and catalog files readable by their owner only.

The counter tests run a real proxy on both stores (memory, redis): requests admitted
before a change must still count after it.
Run: /usr/bin/python3 -m pytest tests/e2e/test_tierctl_operator.py
"""
import json
import os
import pathlib
import re
import shutil
import sqlite3
import stat
import subprocess
import time

import pytest

from conftest import ietf_policy, wait_until

from test_tierctl import KEY_RE, TIERCTL, clean_env


class Ctl:
    """tierctl on one catalog file; run() returns the CompletedProcess, checks only rc."""

    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.db = self.tmp / "plans.db"

    def run(self, *args, rc=0, db=True, umask=None, env=None):
        cmd = [TIERCTL] + (["--db", str(self.db)] if db else []) + [str(a) for a in args]
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=str(self.tmp),
                            env=env if env is not None else clean_env(), stdin=subprocess.DEVNULL,
                            preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)
        if rc is not None:
            assert cp.returncode == rc, "%s: exit %d, wanted %d\nstdout: %s\nstderr: %s" % (
                " ".join(cmd), cp.returncode, rc, cp.stdout, cp.stderr)
        return cp

    __call__ = run

    def change(self, *args):
        """A command that changes the catalog: exit 0, one line on stderr. Returns it."""
        cp = self.run(*args)
        lines = cp.stderr.splitlines()
        assert len(lines) == 1 and cp.stderr.endswith("\n"), \
            "%s: wanted one line on stderr, got %r" % (" ".join(map(str, args)), cp.stderr)
        return lines[0]

    def read(self, *args):
        """A command that only reads: exit 0, nothing on stderr. Returns stdout."""
        cp = self.run(*args)
        assert cp.stderr == "", "%s wrote on stderr: %r" % (" ".join(map(str, args)), cp.stderr)
        return cp.stdout

    def plan(self, name):
        return json.loads(self.read("plan", "show", name, "--json"))

    def export(self):
        return self.read("export")


@pytest.fixture
def bare(tmp_path):
    assert os.access(TIERCTL, os.X_OK), "tierctl not built at %s (set TIERCTL_BIN)" % TIERCTL
    return Ctl(tmp_path)


@pytest.fixture
def ctl(bare):
    bare("init")
    return bare


def routeless(plan, kind):
    return [l for l in plan["limits"] if l["kind"] == kind and "route" not in l]


def shape(limit):
    return (limit["amount"], limit.get("window_ms"), limit.get("burst"), limit.get("algorithm"))


# ---------------------------------------------------------------------------------------
# key create: the key alone on stdout

def test_key_create_prints_the_key_alone_on_stdout(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    cp = ctl("key", "create", "alice", "--label", "laptop")
    # stdout is the key and its newline, nothing else; the notice goes to stderr and
    # never holds the key.
    assert KEY_RE.match(cp.stdout.rstrip("\n")) and cp.stdout.count("\n") == 1, repr(cp.stdout)
    key = cp.stdout.strip()
    assert key not in cp.stderr and key[3:] not in cp.stderr
    assert len(cp.stderr.splitlines()) == 1 and "alice" in cp.stderr, cp.stderr
    # What an operator types: the shell captures exactly the key.
    sh = subprocess.run(["sh", "-c", 'KEY=$("$0" --db "$1" key create alice) && printf "%s" "$KEY"',
                         TIERCTL, str(ctl.db)], capture_output=True, text=True, env=clean_env())
    assert sh.returncode == 0, sh.stderr
    assert KEY_RE.match(sh.stdout), repr(sh.stdout)
    # Both keys are on record (as hashes) under their labels.
    keys = json.loads(ctl.read("key", "list", "alice", "--json"))
    assert [k["label"] for k in keys] == ["laptop", ""]


def test_key_create_json(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    cp = ctl("key", "create", "alice", "--label", "ci runner", "--json")
    doc = json.loads(cp.stdout)
    assert set(doc) == {"key_id", "user", "label", "key"}, doc
    assert doc["user"] == "alice" and doc["label"] == "ci runner"
    assert KEY_RE.match(doc["key"]), doc
    listed = json.loads(ctl.read("key", "list", "alice", "--json"))
    assert [k["id"] for k in listed] == [doc["key_id"]]
    assert doc["key"] not in cp.stderr
    # Without a label: "" (as key list has it).
    assert json.loads(ctl("key", "create", "alice", "--json").stdout)["label"] == ""


# ---------------------------------------------------------------------------------------
# --version, --help

def test_version_and_help_exit_0(bare):
    cp = bare("--version", db=False)
    assert re.match(r"^tierctl \d+\.\d+\.\d+", cp.stdout) and cp.stdout.count("\n") == 1, cp.stdout
    assert cp.stderr == ""
    for args in (["--help"], ["-h"], ["help"]):
        cp = bare(*args, db=False)
        assert cp.stderr == ""
        for words in ("key create", "limit set", "backup", "--json", "--version"):
            assert words in cp.stdout, (args, words)
    # Neither needs a catalog, and neither creates one.
    assert not bare.db.exists() and not (bare.tmp / "plans.db").exists()


# ---------------------------------------------------------------------------------------
# one line on stderr for a change, none for a read

def test_changes_say_what_they_changed_in_one_line(ctl, tmp_path):
    line = ctl.change("plan", "add", "tiny", "--rate", "3/10s")
    assert "tiny" in line and "3/10s" in line, line
    line = ctl.change("limit", "add", "tiny", "--rate", "100/day")
    assert "100/day" in line, line
    day_id = [l["id"] for l in routeless(ctl.plan("tiny"), "rate") if l["window_ms"] == 86400000][0]
    assert str(day_id) in line, line
    line = ctl.change("plan", "set", "tiny", "--rate", "5/s")
    # What it replaced, and with what.
    assert re.search(r"plan tiny: rate 3/10s, 100/day -> 5/s", line), line
    line = ctl.change("plan", "set", "tiny", "--shadow", "on")
    assert "shadow" in line and "on" in line, line
    line = ctl.change("user", "add", "alice", "--plan", "tiny")
    assert line.endswith("user alice: added on plan tiny"), line
    line = ctl.change("user", "set", "alice", "--plan", "free")
    assert "alice" in line and "tiny" in line and "free" in line, line
    key_line = ctl.change("key", "create", "alice")
    key_id = json.loads(ctl.read("key", "list", "alice", "--json"))[0]["id"]
    line = ctl.change("key", "revoke", key_id)
    assert line.endswith("key %d revoked" % key_id), line
    limit_id = routeless(ctl.plan("tiny"), "rate")[0]["id"]
    line = ctl.change("limit", "set", "tiny", limit_id, "--rate", "6/s")
    assert str(limit_id) in line and "5/s" in line and "6/s" in line, line
    line = ctl.change("limit", "remove", "tiny", limit_id)
    assert str(limit_id) in line, line
    line = ctl.change("user", "remove", "alice")
    assert "alice" in line, line
    line = ctl.change("plan", "remove", "tiny")
    assert "tiny" in line, line
    dump = tmp_path / "dump.json"
    dump.write_text(ctl.export())
    line = ctl.change("import", dump)
    assert "import" in line, line
    line = ctl.change("init")
    assert line, line
    assert "tp_" not in key_line

    # Reads say nothing on stderr.
    for args in (["plan", "list"], ["plan", "list", "--json"], ["plan", "show", "free"],
                 ["user", "list"], ["key", "list"], ["export"]):
        ctl.read(*args)
    ctl.read("export", tmp_path / "out.json")


# ---------------------------------------------------------------------------------------
# limit set: one limit changed in place

def test_limit_set_changes_one_limit_in_place(ctl):
    ctl("plan", "add", "gold", "--rate", "10/min", "--burst", "2", "--concurrency", "5",
        "--ws-messages", "4/s")
    route_id = int(ctl("limit", "add", "gold", "--rate", "1/s", "--route", "POST /upload").stdout)
    before = ctl.plan("gold")
    rate_id = routeless(before, "rate")[0]["id"]
    conc_id = routeless(before, "concurrency")[0]["id"]
    ws_id = routeless(before, "ws_messages")[0]["id"]

    # Only what is given changes; the id stays.
    ctl.change("limit", "set", "gold", rate_id, "--rate", "20/min")
    assert [(l["id"],) + shape(l) for l in routeless(ctl.plan("gold"), "rate")] == \
        [(rate_id, 20, 60000, 2, "sliding-log")]
    ctl.change("limit", "set", "gold", rate_id, "--burst", "0", "--algorithm", "token-bucket")
    assert [(l["id"],) + shape(l) for l in routeless(ctl.plan("gold"), "rate")] == \
        [(rate_id, 20, 60000, 0, "token-bucket")]
    ctl.change("limit", "set", "gold", conc_id, "--concurrency", "7")
    ctl.change("limit", "set", "gold", ws_id, "--ws-messages", "9/min")
    ctl.change("limit", "set", "gold", route_id, "--rate", "2/s")
    after = ctl.plan("gold")
    assert [(l["id"], l["amount"]) for l in routeless(after, "concurrency")] == [(conc_id, 7)]
    assert [(l["id"], l["amount"], l["window_ms"]) for l in routeless(after, "ws_messages")] == \
        [(ws_id, 9, 60000)]
    routed = [l for l in after["limits"] if "route" in l]
    assert [(l["id"], l["amount"], l["route"]) for l in routed] == [(route_id, 2, "POST /upload")]
    assert len(after["limits"]) == len(before["limits"])

    # Refusals change nothing: flags of another kind, a limit of another plan, no limit.
    before = ctl.export()
    for args, rc in ((["gold", rate_id, "--concurrency", "3"], 1),
                     (["gold", conc_id, "--rate", "3/s"], 1),
                     (["free", rate_id, "--rate", "3/s"], 1),
                     (["gold", 9999, "--rate", "3/s"], 1),
                     (["gold", rate_id], 2),
                     (["gold", "x", "--rate", "3/s"], 2),
                     (["gold", rate_id, "--rate", "3/s", "--route", "GET /x"], 2)):
        cp = ctl("limit", "set", *args, rc=rc)
        assert cp.stderr.startswith("tierctl: "), cp.stderr
    assert ctl.export() == before


# ---------------------------------------------------------------------------------------
# plan set keeps the ids of the limits that survive

def test_plan_set_keeps_the_id_of_the_limit_it_changes(ctl):
    ctl("plan", "add", "tiny", "--rate", "2/min", "--concurrency", "3")
    rate_id = routeless(ctl.plan("tiny"), "rate")[0]["id"]
    conc_id = routeless(ctl.plan("tiny"), "concurrency")[0]["id"]
    # The very value it had: nothing changes, not even the id.
    ctl.change("plan", "set", "tiny", "--rate", "2/min")
    assert [(l["id"],) + shape(l) for l in routeless(ctl.plan("tiny"), "rate")] == \
        [(rate_id, 2, 60000, 0, "sliding-log")]
    ctl.change("plan", "set", "tiny", "--rate", "5/h", "--concurrency", "4")
    p = ctl.plan("tiny")
    assert [(l["id"],) + shape(l) for l in routeless(p, "rate")] == [(rate_id, 5, 3600000, 0, "sliding-log")]
    assert [(l["id"], l["amount"]) for l in routeless(p, "concurrency")] == [(conc_id, 4)]


def test_plan_set_with_several_rate_limits_keeps_the_one_of_the_same_window(ctl):
    ctl("plan", "add", "tiny", "--rate", "3/10s")
    ctl("limit", "add", "tiny", "--rate", "100/day")
    ten_s, day = [l["id"] for l in routeless(ctl.plan("tiny"), "rate")]
    # The limit with the same window survives (its id kept); the other one is removed,
    # and the line on stderr says so.
    line = ctl.change("plan", "set", "tiny", "--rate", "200/day")
    assert [(l["id"],) + shape(l) for l in routeless(ctl.plan("tiny"), "rate")] == \
        [(day, 200, 86400000, 0, "sliding-log")]
    assert "3/10s" in line and "100/day" in line and "200/day" in line, line
    # No window in common: the first one survives.
    ctl("limit", "add", "tiny", "--rate", "3/10s")
    line = ctl.change("plan", "set", "tiny", "--rate", "7/s")
    assert [(l["id"],) + shape(l) for l in routeless(ctl.plan("tiny"), "rate")] == \
        [(day, 7, 1000, 0, "sliding-log")]
    # --burst alone changes every plan-wide rate limit in place.
    ctl("limit", "add", "tiny", "--rate", "50/h")
    ids = [l["id"] for l in routeless(ctl.plan("tiny"), "rate")]
    ctl.change("plan", "set", "tiny", "--burst", "2")
    assert [(l["id"], l["burst"]) for l in routeless(ctl.plan("tiny"), "rate")] == [(i, 2) for i in ids]
    assert ten_s not in ids


def test_failed_limit_change_changes_nothing(ctl):
    # The burst fits the first limit (1/s) and not the second (2/min): the command is
    # refused as a whole, the first limit untouched too.
    ctl("plan", "add", "tiny", "--rate", "1/s")
    ctl("limit", "add", "tiny", "--rate", "2/min")
    before = ctl.export()
    cp = ctl("plan", "set", "tiny", "--burst", "4503599627369", rc=1)
    assert len(cp.stderr.splitlines()) == 1 and "out of range" in cp.stderr, cp.stderr
    assert ctl.export() == before
    rate_id = routeless(ctl.plan("tiny"), "rate")[1]["id"]
    cp = ctl("limit", "set", "tiny", rate_id, "--burst", "4503599627369", rc=1)
    assert ctl.export() == before


# ---------------------------------------------------------------------------------------
# counters carry over a change (a running proxy, both stores)

LIMIT_PLAN = "tiny"


def away_from_window_edge(window_s):
    """Fixed and sliding windows are aligned to multiples of the window: start well inside
    one, so that the test's few seconds never straddle an edge."""
    left = window_s - time.time() % window_s
    if left < 30:
        time.sleep(left + 0.5)


def admitted(proxy, key, n):
    return sum(1 for _ in range(n) if proxy.get("/x", key=key).status == 200)


def wait_for_limit(proxy, probe_key, amount):
    """Waits until the proxy serves the changed plan: a probe user's RateLimit-Policy."""
    assert wait_until(lambda: amount in ietf_policy(proxy.get("/x", key=probe_key)).values(), 5), \
        "the change did not reach the proxy"


def carry_over(catalog, start_proxy, plan_flags, change, new_amount, after):
    catalog.plan(LIMIT_PLAN, *plan_flags)
    _, key = catalog.user_key(LIMIT_PLAN)
    _, probe = catalog.user_key(LIMIT_PLAN)
    p = start_proxy(catalog)
    assert admitted(p, key, 2) == 2
    assert p.get("/x", key=key).status == 429
    catalog.run(*change)
    if new_amount is None:
        time.sleep(1.2)   # nothing the proxy shows changes: several refreshes (200 ms)
    else:
        wait_for_limit(p, probe, new_amount)
    assert admitted(p, key, 4) == after


def test_same_rate_again_keeps_the_count(catalog, start_proxy):
    # 2/min, 2 admitted: setting 2/min again must not admit 2 more in the same minute.
    carry_over(catalog, start_proxy, ["--rate", "2/min"], ["plan", "set", LIMIT_PLAN, "--rate", "2/min"],
               None, 0)


@pytest.mark.parametrize("algorithm,after", [
    ("sliding-log", 1), ("sliding-window", 1), ("fixed-window", 1),
    ("token-bucket", 0),   # the bucket is empty: a larger one refills at 3/h, 1 per 20 min
])
def test_raised_rate_counts_what_was_admitted(catalog, start_proxy, algorithm, after):
    # 2/h, 2 admitted, then 3/h: one more, not three.
    away_from_window_edge(3600)
    carry_over(catalog, start_proxy, ["--rate", "2/h", "--algorithm", algorithm],
               ["plan", "set", LIMIT_PLAN, "--rate", "3/h", "--algorithm", algorithm], 3, after)


@pytest.mark.parametrize("algorithm,after", [
    ("sliding-log", 1), ("sliding-window", 1), ("fixed-window", 1), ("token-bucket", 0),
])
def test_raised_burst_counts_what_was_admitted(catalog, start_proxy, algorithm, after):
    away_from_window_edge(3600)
    carry_over(catalog, start_proxy, ["--rate", "2/h", "--algorithm", algorithm],
               ["plan", "set", LIMIT_PLAN, "--burst", "1"], 3, after)


def test_sliding_log_counts_across_a_window_change(catalog, start_proxy):
    # 2/min, 2 admitted, then 3/h: the two requests of the last minute are in the last hour.
    carry_over(catalog, start_proxy, ["--rate", "2/min"], ["plan", "set", LIMIT_PLAN, "--rate", "3/h"], 3, 1)


def test_limit_set_counts_what_was_admitted(catalog, start_proxy):
    catalog.plan(LIMIT_PLAN, "--rate", "2/min")
    out = catalog.run("plan", "show", LIMIT_PLAN, "--json").stdout
    limit_id = json.loads(out)["limits"][0]["id"]
    _, key = catalog.user_key(LIMIT_PLAN)
    _, probe = catalog.user_key(LIMIT_PLAN)
    p = start_proxy(catalog)
    assert admitted(p, key, 2) == 2
    catalog.run("limit", "set", LIMIT_PLAN, limit_id, "--rate", "3/min")
    wait_for_limit(p, probe, 3)
    assert admitted(p, key, 4) == 1


def test_grown_window_keeps_the_log_past_the_old_expiry(catalog, proxies, redis):
    # 2/2s, 2 admitted, then 2/20s: the two requests count for 20 s. The stores keep a
    # log about 2 windows after its last entry; a rejected check under the grown window
    # must keep it for the new one. Two proxies on one Redis: the second never saw the
    # rejection (each remembers its own), so it asks the store after the old 4 s are over.
    catalog.plan(LIMIT_PLAN, "--rate", "2/2s")
    _, key = catalog.user_key(LIMIT_PLAN)
    _, probe = catalog.user_key(LIMIT_PLAN)
    prefix = "tpgrow%d:" % os.getpid()
    a = proxies.start(catalog, store="redis", key_prefix=prefix)
    b = proxies.start(catalog, store="redis", key_prefix=prefix)
    t0 = time.monotonic()
    assert admitted(a, key, 2) == 2
    catalog.run("plan", "set", LIMIT_PLAN, "--rate", "2/20s")
    assert wait_until(lambda: "w=20" in (a.get("/x", key=probe).header("RateLimit-Policy") or ""), 3), \
        "the change did not reach the proxy"
    assert a.get("/x", key=key).status == 429
    time.sleep(max(0.0, t0 + 5.0 - time.monotonic()))
    assert b.get("/x", key=key).status == 429, "the log was dropped on the old window's expiry"


def test_algorithm_change_starts_afresh(catalog, start_proxy):
    # The stores keep a state per algorithm: another algorithm starts from nothing.
    away_from_window_edge(3600)
    carry_over(catalog, start_proxy, ["--rate", "2/h"],
               ["plan", "set", LIMIT_PLAN, "--rate", "2/h", "--algorithm", "fixed-window"], None, 2)


# ---------------------------------------------------------------------------------------
# backup

def test_backup_copies_a_live_catalog_with_its_wal(ctl, tmp_path):
    # A reader holds the catalog open (as a proxy does), so tierctl's changes stay in the
    # WAL file: a plain copy of plans.db would miss them.
    holder = sqlite3.connect(str(ctl.db))
    holder.execute("SELECT count(*) FROM plans").fetchone()
    try:
        ctl("plan", "add", "gold", "--rate", "500/min")
        ctl("user", "add", "alice", "--plan", "gold")
        wal = pathlib.Path(str(ctl.db) + "-wal")
        assert wal.exists() and wal.stat().st_size > 0, "the changes are not in the WAL"
        plain = tmp_path / "plain.db"
        shutil.copy(ctl.db, plain)
        with sqlite3.connect(str(plain)) as db:
            assert db.execute("SELECT count(*) FROM users").fetchone()[0] == 0   # lost with cp

        # Another writer holds the write lock with a change it has not committed: the
        # backup neither waits for it nor sees it.
        writer = sqlite3.connect(str(ctl.db), isolation_level=None)
        writer.execute("BEGIN IMMEDIATE")
        writer.execute("INSERT INTO plans (name) VALUES ('uncommitted')")
        try:
            copy = tmp_path / "copy.db"
            # (Had it waited for the writer's lock, it would have failed: "locked".)
            cp = ctl("backup", copy)
            assert cp.stdout == "" and cp.stderr == "", cp
        finally:
            writer.execute("ROLLBACK")
            writer.close()
        # The copy stands alone: moved away from any -wal file, it holds everything.
        alone = tmp_path / "alone"
        alone.mkdir()
        shutil.move(str(copy), alone / "copy.db")
        assert not any(p.name.startswith("copy.db-") for p in tmp_path.iterdir())
        with sqlite3.connect("file:%s?mode=ro" % (alone / "copy.db"), uri=True) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert db.execute("SELECT p.name FROM users u JOIN plans p ON p.id = u.plan_id"
                              " WHERE u.id = 'alice'").fetchone() == ("gold",)
            assert db.execute("SELECT count(*) FROM plans WHERE name = 'uncommitted'").fetchone()[0] == 0
        assert stat.S_IMODE((alone / "copy.db").stat().st_mode) == 0o600
        # One self-contained file: reading it leaves nothing beside it.
        assert [p.name for p in alone.iterdir()] == ["copy.db"]
        # tierctl reads the copy like the original.
        other = Ctl(alone)
        other.db = alone / "copy.db"
        assert json.loads(other.export())["users"] == json.loads(ctl.export())["users"]
    finally:
        holder.close()


def test_backup_refuses_to_overwrite(ctl, tmp_path):
    target = tmp_path / "exists.db"
    target.write_bytes(b"precious")
    cp = ctl("backup", target, rc=1)
    assert cp.stderr.startswith("tierctl: ") and len(cp.stderr.splitlines()) == 1, cp.stderr
    assert "exists" in cp.stderr, cp.stderr
    assert target.read_bytes() == b"precious"
    # Nor onto the catalog itself, nor without a file name.
    ctl("backup", ctl.db, rc=1)
    ctl("backup", rc=2)
    # A directory that does not exist: refused, nothing left behind.
    ctl("backup", tmp_path / "no" / "such" / "dir.db", rc=1)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("exists")) == ["exists.db"]


# ---------------------------------------------------------------------------------------
# new catalog files: owner only

def mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_new_catalog_files_are_owner_only(bare, tmp_path, umask):
    bare("init", umask=umask)
    assert mode(bare.db) == 0o600, oct(mode(bare.db))
    # -wal and -shm exist while someone holds the catalog open; SQLite gives them the
    # catalog's mode.
    holder = sqlite3.connect(str(bare.db))
    holder.execute("SELECT count(*) FROM plans").fetchone()
    try:
        bare("plan", "add", "gold", umask=umask)
        for suffix in ("-wal", "-shm"):
            path = pathlib.Path(str(bare.db) + suffix)
            assert path.exists(), suffix
            assert mode(path) == 0o600, (suffix, oct(mode(path)))
    finally:
        holder.close()
    # A catalog made by import too.
    dump = tmp_path / "dump.json"
    dump.write_text(bare.export())
    other = tmp_path / "imported.db"
    bare("--db", other, "import", dump, db=False, umask=umask)
    assert mode(other) == 0o600, oct(mode(other))


def test_existing_catalog_keeps_its_mode(bare):
    # An operator who chose a mode (a group of readers) keeps it.
    bare("init")
    os.chmod(bare.db, 0o640)
    bare("plan", "add", "gold")
    assert mode(bare.db) == 0o640
