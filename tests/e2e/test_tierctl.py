"""tierctl end to end: every command of SPEC.md's tierctl block, its exit status and output,
and the promises around them: keys shown once and stored only as hashes, --json that parses,
export/import round trips, and commands that change nothing when they fail.

Self-contained: needs only the tierctl binary (env TIERCTL_BIN, default build/tiers/tierctl
under the repository root) and Python's sqlite3 module. Each test runs in its own tmp dir.
Run: /usr/bin/python3 -m pytest tests/e2e/test_tierctl.py
"""
import hashlib
import json
import os
import pathlib
import re
import signal
import sqlite3
import subprocess
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TIERCTL = os.path.abspath(os.environ.get("TIERCTL_BIN", str(ROOT / "build" / "tiers" / "tierctl")))
KEY_RE = re.compile(r"^tp_[0-9a-f]{48}$")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "TIERPROXY_DB"}
    env.update(extra)
    return env


CHANGES = {"init", "plan add", "plan set", "plan remove", "limit add", "limit set", "limit remove",
           "user add", "user set", "user remove", "key create", "key revoke", "import"}


def changes_catalog(args):
    """Whether tierctl ARGS is a command that changes the catalog (one line on stderr)."""
    words = [str(a) for a in args]
    if "--help" in words or "-h" in words:
        return False
    i = 0
    while i < len(words) and words[i].startswith("-"):
        i += 2 if words[i] == "--db" else 1
    rest = [w for w in words[i:i + 2]]
    return " ".join(rest[:1]) in CHANGES or " ".join(rest) in CHANGES


class Ctl:
    """Runs tierctl against one catalog file and checks the exit status."""

    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.db = self.tmp / "plans.db"

    def run(self, *args, rc=0, stdin=None, env=None, db=True, timeout=60):
        cmd = [TIERCTL] + (["--db", str(self.db)] if db else []) + [str(a) for a in args]
        cp = subprocess.run(cmd, capture_output=True, text=True, input=stdin, timeout=timeout,
                            env=env if env is not None else clean_env(), cwd=str(self.tmp))
        if rc is not None:
            assert cp.returncode == rc, "%s: exit %d, wanted %d\nstdout: %s\nstderr: %s" % (
                " ".join(cmd), cp.returncode, rc, cp.stdout, cp.stderr)
        if rc == 0:
            if changes_catalog(args):
                # A change says what it changed, in one line.
                assert len(cp.stderr.splitlines()) == 1 and cp.stderr.endswith("\n"), cp.stderr
            else:
                assert cp.stderr == "", cp.stderr
        elif rc == 1:
            # Refused: one line saying why, nothing else.
            lines = cp.stderr.splitlines()
            assert len(lines) == 1 and lines[0].startswith("tierctl: "), cp.stderr
        elif rc == 2:
            assert "usage: tierctl" in cp.stderr, cp.stderr
        return cp

    __call__ = run

    def json(self, *args):
        return json.loads(self.run(*args, "--json").stdout)

    def export(self):
        return self.run("export").stdout

    def refused(self, *args, why=None):
        """Runs a command that must fail (exit 1) and change nothing."""
        before = self.export()
        cp = self.run(*args, rc=1)
        if why:
            assert why in cp.stderr, cp.stderr
        assert self.export() == before, "a failed command changed the catalog"
        return cp

    def plan(self, name):
        return self.json("plan", "show", name)

    def key(self, user, *extra):
        out = self.run("key", "create", user, *extra).stdout
        lines = out.splitlines()
        assert KEY_RE.match(lines[-1]), out
        return lines[-1]


@pytest.fixture
def bare(tmp_path):
    assert os.access(TIERCTL, os.X_OK), "tierctl not built at %s (set TIERCTL_BIN)" % TIERCTL
    return Ctl(tmp_path)


@pytest.fixture
def ctl(bare):
    bare("init")
    return bare


def limits_by_kind(plan):
    out = {}
    for limit in plan["limits"]:
        out.setdefault(limit["kind"], []).append(limit)
    return out


def routeless(plan, kind):
    return [l for l in plan["limits"] if l["kind"] == kind and "route" not in l]


# ---------------------------------------------------------------------------------------
# usage, help, the catalog path

def test_help_lists_every_command(bare):
    out = bare("--help", db=False).stdout
    for words in ["init", "plan add", "plan set", "plan list", "plan show", "plan remove",
                  "limit add", "limit remove", "user add", "user set", "user list", "user show",
                  "user remove", "key create", "key list", "key revoke", "export", "import",
                  "--rate", "--burst", "--algorithm", "--concurrency", "--ws-messages", "--shadow",
                  "--route", "--json", "--db"]:
        assert words in out, words
    # Per-command help goes to stdout, exit 0.
    assert "usage: tierctl" in bare("plan", "add", "--help").stdout


@pytest.mark.parametrize("args", [
    [],                                      # no command
    ["frobnicate"],                          # unknown command
    ["plan"],                                # group without subcommand
    ["plan", "frob"],
    ["plan", "add"],                         # missing NAME
    ["plan", "add", "a", "b"],               # extra argument
    ["plan", "list", "--rate", "1/s"],       # flag the command does not take
    ["plan", "add", "x", "--rate"],          # flag without its value
    ["plan", "add", "x", "--rate", "5"],     # bad rate
    ["plan", "add", "x", "--rate", "0/s"],
    ["plan", "add", "x", "--rate", "10/fortnight"],
    ["plan", "add", "x", "--rate", "1/s", "--rate", "2/s"],
    ["plan", "add", "x", "--concurrency", "0"],
    ["plan", "add", "x", "--burst", "-1", "--rate", "1/s"],
    ["plan", "add", "x", "--algorithm", "leaky", "--rate", "1/s"],
    ["plan", "add", "x", "--shadow", "maybe"],
    ["plan", "add", "x", "--burst", "3"],    # --burst without --rate
    ["plan", "add", "bad name"],
    ["plan", "set", "free"],                 # nothing to set
    ["limit", "add", "free"],                # no limit kind
    ["limit", "add", "free", "--rate", "1/s", "--route", "/v1"],
    ["limit", "add", "free", "--rate", "1/s", "--route", "GET v1"],
    ["limit", "add", "free", "--rate", "1/s", "--shadow", "on"],
    ["limit", "remove", "free", "one"],
    ["user", "add", "alice"],                # --plan missing
    ["user", "add", "has space", "--plan", "free"],
    ["key", "revoke", "abc"],
    ["key", "create", "alice", "--label", "a\nb"],
    ["--bogus", "plan", "list"],
])
def test_bad_usage_exits_2_and_changes_nothing(ctl, args):
    before = ctl.export()
    cp = ctl(*args, rc=2)
    assert cp.stdout == ""
    assert cp.stderr.startswith("tierctl: ")
    assert ctl.export() == before


def test_db_path_flag_env_and_default(bare):
    env_db = bare.tmp / "from-env.db"
    flag_db = bare.tmp / "from-flag.db"
    # Default: ./plans.db in the working directory.
    bare("init", db=False)
    assert (bare.tmp / "plans.db").exists()
    # $TIERPROXY_DB when set.
    bare("init", db=False, env=clean_env(TIERPROXY_DB=str(env_db)))
    assert env_db.exists()
    # --db beats the environment, before or after the command.
    bare("--db", flag_db, "init", db=False, env=clean_env(TIERPROXY_DB=str(env_db)))
    assert flag_db.exists()
    bare("plan", "add", "only-in-flag", "--db=%s" % flag_db, db=False,
         env=clean_env(TIERPROXY_DB=str(env_db)))
    assert "only-in-flag" in bare("--db", flag_db, "plan", "list", db=False).stdout
    assert "only-in-flag" not in bare("plan", "list", db=False,
                                      env=clean_env(TIERPROXY_DB=str(env_db))).stdout


def test_commands_need_an_initialized_catalog(bare):
    for args in (["plan", "list"], ["plan", "add", "gold"], ["key", "list"], ["export"]):
        cp = bare(*args, rc=1)
        assert "init" in cp.stderr
    assert not bare.db.exists(), "a command other than init/import created the catalog"


def test_not_a_database(bare):
    bare.db.write_bytes(b"definitely not SQLite " * 100)
    bare("plan", "list", rc=1)
    bare("init", rc=1)


# ---------------------------------------------------------------------------------------
# init

def test_init_creates_default_plans(ctl):
    plans = {p["name"]: p for p in ctl.json("plan", "list")}
    assert list(plans) == ["free", "starter", "pro"]
    for name, rate in (("free", 100), ("starter", 3000), ("pro", 20000)):
        kinds = limits_by_kind(plans[name])
        assert [(l["amount"], l["window_ms"], l["burst"], l["algorithm"]) for l in kinds["rate"]] == \
            [(rate, 60000, 0, "sliding-log")]
        assert [l["amount"] for l in kinds["concurrency"]] == [10]
        assert plans[name]["shadow"] is False
        assert plans[name]["users"] == 0
    # WAL, so that tierctl and the proxies' readers do not block each other.
    with sqlite3.connect(str(ctl.db)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("PRAGMA user_version").fetchone()[0] == 3   # 3: the fleet mark (issue 23)


def test_init_is_idempotent_and_keeps_changes(ctl):
    ctl("plan", "set", "free", "--rate", "5/s")
    ctl("plan", "remove", "pro")
    before = ctl.export()
    ctl("init")
    after = json.loads(ctl.export())
    # free keeps the operator's rate; the missing pro comes back.
    free = [p for p in after["plans"] if p["name"] == "free"][0]
    assert [(l["amount"], l["window_ms"]) for l in routeless(free, "rate")] == [(5, 1000)]
    assert [p["name"] for p in after["plans"]] == ["free", "starter", "pro"]
    ctl("init")
    assert json.loads(ctl.export()) == after
    assert before != ctl.export()


# ---------------------------------------------------------------------------------------
# plans

def test_plan_add_show_list(ctl):
    ctl("plan", "add", "gold", "--rate", "5000/h", "--burst", "10", "--algorithm", "token-bucket",
        "--concurrency", "5", "--ws-messages", "10/15s", "--shadow", "on")
    gold = ctl.plan("gold")
    assert gold["name"] == "gold" and gold["shadow"] is True and gold["users"] == 0
    kinds = limits_by_kind(gold)
    assert [(l["amount"], l["window_ms"], l["burst"], l["algorithm"]) for l in kinds["rate"]] == \
        [(5000, 3600000, 10, "token-bucket")]
    assert [l["amount"] for l in kinds["concurrency"]] == [5]
    assert [(l["amount"], l["window_ms"]) for l in kinds["ws_messages"]] == [(10, 15000)]
    # A plan with no limits at all is allowed.
    ctl("plan", "add", "bare")
    assert ctl.plan("bare")["limits"] == []
    # Text forms.
    listing = ctl("plan", "list").stdout
    assert re.search(r"^gold\s+on\s+5\s+0\s+5000/h burst 10 token-bucket; concurrency 5; ws-messages 10/15s$",
                     listing, re.M), listing
    show = ctl("plan", "show", "gold").stdout
    assert "token-bucket" in show and "5000/h" in show and "ws_messages" in show
    assert [p["name"] for p in ctl.json("plan", "list")] == ["free", "starter", "pro", "gold", "bare"]


def test_plan_add_refusals(ctl):
    ctl.refused("plan", "add", "free", why='"free" already exists')
    ctl.refused("plan", "show", "gold", why='no plan named "gold"')
    # A rate plus burst beyond the exact-integer range is bad usage.
    ctl("plan", "add", "x", "--rate", "1000000000/day", rc=2)


def test_plan_set_replaces_routeless_limits_of_the_kinds_given(ctl):
    ctl("plan", "add", "p", "--rate", "10/s", "--concurrency", "5", "--ws-messages", "3/s")
    route_id = int(ctl("limit", "add", "p", "--rate", "1/s", "--route", "GET /x").stdout)
    before = ctl.plan("p")
    conc_id = routeless(before, "concurrency")[0]["id"]
    ws_id = routeless(before, "ws_messages")[0]["id"]
    old_rate_id = routeless(before, "rate")[0]["id"]

    ctl("plan", "set", "p", "--rate", "20/s")
    p = ctl.plan("p")
    rate = routeless(p, "rate")
    assert [(l["amount"], l["window_ms"], l["burst"], l["algorithm"]) for l in rate] == \
        [(20, 1000, 0, "sliding-log")]
    assert rate[0]["id"] == old_rate_id                     # changed in place: its counts carry over
    assert routeless(p, "concurrency")[0]["id"] == conc_id  # other kinds untouched
    assert routeless(p, "ws_messages")[0]["id"] == ws_id
    assert [l["id"] for l in p["limits"] if "route" in l] == [route_id]   # route limits too

    # --burst / --algorithm alone keep the plan's rate.
    ctl("plan", "set", "p", "--burst", "7")
    ctl("plan", "set", "p", "--algorithm", "fixed-window")
    rate = routeless(ctl.plan("p"), "rate")
    assert [(l["amount"], l["window_ms"], l["burst"], l["algorithm"]) for l in rate] == \
        [(20, 1000, 7, "fixed-window")]

    ctl("plan", "set", "p", "--concurrency", "2", "--ws-messages", "9/min", "--shadow", "on")
    p = ctl.plan("p")
    assert [l["amount"] for l in routeless(p, "concurrency")] == [2]
    assert [(l["amount"], l["window_ms"]) for l in routeless(p, "ws_messages")] == [(9, 60000)]
    assert p["shadow"] is True
    ctl("plan", "set", "p", "--shadow", "off")
    assert ctl.plan("p")["shadow"] is False

    # A plan-wide limit kind the plan did not have is simply added.
    ctl("plan", "add", "q")
    ctl("plan", "set", "q", "--concurrency", "4")
    assert [l["amount"] for l in ctl.plan("q")["limits"]] == [4]


def test_plan_set_refusals(ctl):
    ctl("plan", "add", "norate", "--concurrency", "3")
    ctl.refused("plan", "set", "norate", "--burst", "5", why="no plan-wide rate limit")
    ctl.refused("plan", "set", "gold", "--rate", "1/s", why='no plan named "gold"')


def test_plan_remove(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    ctl.refused("plan", "remove", "free", why="in use")
    ctl("user", "set", "alice", "--plan", "pro")
    ctl("plan", "remove", "free")
    ctl("plan", "show", "free", rc=1)
    ctl.refused("plan", "remove", "free", why='no plan named "free"')
    # Its limits went with it.
    assert all(p["name"] != "free" for p in json.loads(ctl.export())["plans"])


# ---------------------------------------------------------------------------------------
# limits

def test_limit_add_and_remove(ctl):
    out = ctl("limit", "add", "free", "--rate", "10/s", "--concurrency", "2",
              "--route", "get /v1/search").stdout.split()
    ids = [int(x) for x in out]
    assert len(ids) == 2
    any_id = int(ctl("limit", "add", "free", "--rate", "50/min", "--route", "* /v1").stdout)
    plain_id = int(ctl("limit", "add", "free", "--rate", "1000/day").stdout)
    free = ctl.plan("free")
    by_id = {l["id"]: l for l in free["limits"]}
    assert by_id[ids[0]]["route"] == "GET /v1/search" and by_id[ids[0]]["kind"] == "rate"
    assert by_id[ids[1]]["route"] == "GET /v1/search" and by_id[ids[1]]["kind"] == "concurrency"
    assert by_id[any_id]["route"] == "* /v1"
    assert "route" not in by_id[plain_id]
    assert "GET /v1/search" in ctl("plan", "show", "free").stdout

    ctl("limit", "remove", "free", ids[0])
    assert ids[0] not in {l["id"] for l in ctl.plan("free")["limits"]}
    ctl.refused("limit", "remove", "free", ids[0], why="has no limit")
    ctl.refused("limit", "remove", "pro", ids[1], why="has no limit")   # not pro's limit
    ctl.refused("limit", "add", "gold", "--rate", "1/s", why='no plan named "gold"')

    # Ids are never reused: they name limiter state in Redis.
    ctl("limit", "remove", "free", plain_id)
    new_id = int(ctl("limit", "add", "free", "--rate", "1000/day").stdout)
    assert new_id > plain_id


# ---------------------------------------------------------------------------------------
# users

def test_users(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    ctl("user", "add", "bob@example.com", "--plan", "pro")
    ctl.refused("user", "add", "alice", "--plan", "pro", why="already exists")
    ctl.refused("user", "add", "carol", "--plan", "gold", why='no plan named "gold"')
    users = ctl.json("user", "list")
    assert [(u["id"], u["plan"]) for u in users] == [("alice", "free"), ("bob@example.com", "pro")]
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", u["created"]) for u in users)
    assert [u["id"] for u in ctl.json("user", "list", "--plan", "pro")] == ["bob@example.com"]
    ctl.refused("user", "list", "--plan", "gold")
    assert "bob@example.com" in ctl("user", "list").stdout

    ctl("user", "set", "alice", "--plan", "starter")
    alice = ctl.json("user", "show", "alice")
    assert alice["plan"] == "starter" and alice["keys"] == []
    assert "starter" in ctl("user", "show", "alice").stdout
    ctl.refused("user", "set", "alice", "--plan", "gold")
    ctl.refused("user", "set", "nobody", "--plan", "free")
    ctl.refused("user", "show", "nobody")
    assert ctl.plan("starter")["users"] == 1


def test_user_remove_revokes_keys(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    ctl.key("alice")
    ctl.key("alice")
    ctl("user", "remove", "alice")
    ctl.refused("user", "show", "alice")
    ctl.refused("user", "remove", "alice")
    keys = ctl.json("key", "list")
    assert len(keys) == 2 and all(k["revoked"] for k in keys)
    assert ctl.plan("free")["users"] == 0
    # A new user of the same name does not get the old keys back.
    ctl("user", "add", "alice", "--plan", "free")
    assert all(k["revoked"] for k in ctl.json("user", "show", "alice")["keys"])


# ---------------------------------------------------------------------------------------
# keys

def test_key_create_list_revoke(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    ctl("user", "add", "bob", "--plan", "free")
    cp = ctl("key", "create", "alice", "--label", "ci runner")
    key = cp.stdout.splitlines()[-1]
    assert KEY_RE.match(key)
    assert cp.stdout.count(key) == 1                # shown once, alone on its line
    other = ctl.key("alice")
    assert other != key
    ctl.key("bob")
    ctl.refused("key", "create", "nobody", why='no user "nobody"')

    keys = ctl.json("key", "list")
    assert [k["user"] for k in keys] == ["alice", "alice", "bob"]
    assert set(keys[0]) == {"id", "user", "label", "created", "revoked"}
    assert keys[0]["label"] == "ci runner" and keys[0]["revoked"] is None
    assert [k["user"] for k in ctl.json("key", "list", "alice")] == ["alice", "alice"]
    ctl.refused("key", "list", "nobody")
    text = ctl("key", "list").stdout + ctl("key", "list", "alice").stdout
    digest = hashlib.sha256(key.encode()).hexdigest()
    for out in (text, json.dumps(keys), ctl("user", "show", "alice", "--json").stdout):
        assert key not in out and key[3:] not in out and digest not in out

    ctl("key", "revoke", keys[0]["id"])
    revoked = ctl.json("key", "list", "alice")[0]
    assert revoked["revoked"] and re.match(r"^\d{4}-", revoked["revoked"])
    ctl.refused("key", "revoke", keys[0]["id"], why="already revoked")
    ctl.refused("key", "revoke", 999, why="no key")
    assert "ci runner" in ctl("key", "list").stdout


def test_key_stored_only_as_hash(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    cp = ctl("key", "create", "alice")
    key = cp.stdout.splitlines()[-1]
    assert key not in cp.stderr
    digest = hashlib.sha256(key.encode()).digest()
    files = [p for p in ctl.tmp.iterdir() if p.name.startswith("plans.db")]
    blob = b"".join(p.read_bytes() for p in files)
    # Neither the key nor its random part, in text or as raw bytes, is anywhere in the
    # catalog's files (main, -wal, -shm); its SHA-256 is.
    assert key.encode() not in blob
    assert key[3:].encode() not in blob
    assert bytes.fromhex(key[3:]) not in blob
    assert digest in blob
    with sqlite3.connect(str(ctl.db)) as db:
        assert db.execute("SELECT count(*) FROM api_keys WHERE hash = ?", (digest,)).fetchone()[0] == 1
    # The export carries the hash, not the key.
    exported = ctl.export()
    assert key not in exported and hashlib.sha256(key.encode()).hexdigest() in exported


def test_json_on_every_list_and_show(ctl):
    ctl("user", "add", "alice", "--plan", "free")
    ctl.key("alice", "--label", 'quote " and \\ backslash')
    for args in (["plan", "list"], ["plan", "show", "free"], ["user", "list"],
                 ["user", "list", "--plan", "free"], ["user", "show", "alice"],
                 ["key", "list"], ["key", "list", "alice"]):
        data = ctl.json(*args)
        assert data, args
    assert ctl.json("key", "list")[0]["label"] == 'quote " and \\ backslash'


# ---------------------------------------------------------------------------------------
# export and import

def make_rich_catalog(ctl):
    ctl("plan", "add", "gold", "--rate", "5000/h", "--burst", "10", "--algorithm", "sliding-window",
        "--concurrency", "5", "--ws-messages", "10/s", "--shadow", "on")
    ctl("limit", "add", "gold", "--rate", "10/s", "--route", "POST /v1/upload")
    ctl("limit", "add", "free", "--rate", "1/s", "--concurrency", "1", "--route", "* /search")
    gone = int(ctl("limit", "add", "free", "--rate", "9/s").stdout)
    ctl("limit", "remove", "free", gone)        # leaves a gap: ids must survive as they are
    for i, plan in enumerate(["free", "gold", "pro", "gold"]):
        ctl("user", "add", "user%d" % i, "--plan", plan)
        ctl.key("user%d" % i, "--label", "k%d" % i)
    ctl.key("user1")
    ctl("key", "revoke", 2)
    ctl("user", "add", "leaver", "--plan", "free")
    ctl.key("leaver")
    ctl("user", "remove", "leaver")


def test_export_import_round_trip(ctl, tmp_path):
    make_rich_catalog(ctl)
    exported = ctl.export()
    doc = json.loads(exported)
    assert doc["format"] == "tierproxy-catalog" and doc["version"] == 2
    assert {"plans", "users", "api_keys", "last_ids"} <= set(doc)
    ctl("export", tmp_path / "out.json")
    assert (tmp_path / "out.json").read_text() == exported     # FILE and stdout agree

    other = Ctl(tmp_path / "other")
    other.tmp.mkdir()
    other("import", tmp_path / "out.json")                      # creates a new catalog
    assert other.export() == exported
    # The same ids, so a fleet's limiter state lines up; new ids continue past the old ones.
    new_id = int(other("limit", "add", "free", "--rate", "2/s").stdout)
    assert new_id > doc["last_ids"]["limits"]
    # Keys still work by hash: the same user behind the same digest.
    assert other.json("key", "list") == ctl.json("key", "list")
    # From stdin too, over an existing catalog: replaces everything.
    third = Ctl(tmp_path / "third")
    third.tmp.mkdir()
    third("init")
    third("plan", "add", "local-only")
    third("import", "-", stdin=exported)
    assert json.loads(third.export())["plans"] == doc["plans"]
    third.refused("plan", "show", "local-only")


def test_import_replaces_whole_catalog(ctl, tmp_path):
    snapshot = ctl.export()
    ctl("plan", "add", "temp")
    ctl("user", "add", "t", "--plan", "temp")
    (tmp_path / "snap.json").write_text(snapshot)
    ctl("import", tmp_path / "snap.json")
    ctl.refused("plan", "show", "temp")
    ctl.refused("user", "show", "t")


def mutate(doc, path, value):
    """Sets doc[path...] = value; value None deletes."""
    target = doc
    for p in path[:-1]:
        target = target[p]
    if value is None:
        del target[path[-1]]
    else:
        target[path[-1]] = value


MALFORMED = [
    ("not json", None),
    ("[]", None),
    ("{}", None),
    (None, (["format"], "something-else")),
    (None, (["version"], 3)),
    (None, (["extra"], 1)),
    (None, (["plans", 0, "name"], "bad name")),
    (None, (["plans", 1, "name"], "free")),                      # duplicate name
    (None, (["plans", 1, "id"], 1)),                             # duplicate id
    (None, (["plans", 0, "limits", 0, "amount"], 0)),
    (None, (["plans", 0, "limits", 0, "kind"], "speed")),
    (None, (["plans", 0, "limits", 0, "algorithm"], "leaky")),
    (None, (["plans", 0, "limits", 0, "window_ms"], None)),
    (None, (["plans", 0, "limits", 0, "amount"], 1 << 60)),
    (None, (["plans", 0, "limits", 0, "colour"], "red")),
    (None, (["plans", 0, "limits", 1, "id"], 1)),                # duplicate limit id
    (None, (["plans", 0, "limits", 0, "route"], "GET nope")),
    (None, (["users", 0, "plan"], "nonexistent")),
    (None, (["users", 0, "id"], "has space")),
    (None, (["users", 1, "id"], "user0")),                       # duplicate user
    (None, (["users", 0, "created"], "yesterday")),
    (None, (["api_keys", 0, "sha256"], "abc")),
    (None, (["api_keys", 1, "sha256"], "SAME")),                 # duplicate hash (filled in)
    (None, (["api_keys", 0, "user"], "ghost")),                  # active key, no such user
    (None, (["api_keys", 0, "id"], -3)),
]


@pytest.mark.parametrize("text,change", MALFORMED)
def test_malformed_import_changes_nothing(ctl, tmp_path, text, change):
    make_rich_catalog(ctl)
    before = ctl.export()
    if text is None:
        doc = json.loads(before)
        path, value = change
        if value == "SAME":
            value = doc["api_keys"][0]["sha256"]
        mutate(doc, path, value)
        text = json.dumps(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    ctl("import", bad, rc=1)
    assert ctl.export() == before
    # Into a missing catalog: nothing usable is created either.
    other = Ctl(tmp_path / "fresh")
    other.tmp.mkdir()
    other("import", bad, rc=1)
    other("plan", "list", rc=1)


def test_import_missing_file(ctl):
    ctl.refused("import", ctl.tmp / "nope.json")


# ---------------------------------------------------------------------------------------
# atomicity and concurrency

def test_failed_command_changes_nothing(ctl):
    # plan set deletes the old rate limit, then cannot add the new one (burst too big for
    # the window): the whole command rolls back.
    ctl("limit", "add", "free", "--rate", "5/s", "--route", "GET /x")
    ctl.refused("plan", "set", "free", "--burst", "100000000000", why="out of range")
    # limit add with a route on a plan that does not exist: nothing half-added.
    ctl.refused("limit", "add", "gold", "--rate", "1/s", "--concurrency", "2", "--route", "GET /y")
    # A refused user removal: nothing about the keys changes.
    ctl("user", "add", "alice", "--plan", "free")
    ctl.key("alice")
    ctl.refused("user", "remove", "bob")
    assert ctl.json("key", "list")[0]["revoked"] is None


def test_kill_during_import_leaves_old_or_new(ctl, tmp_path):
    make_rich_catalog(ctl)
    before = ctl.export()
    doc = json.loads(before)
    for i in range(60000):
        doc["users"].append({"id": "bulk%06d" % i, "plan": "pro", "created": "2024-01-01T00:00:00Z"})
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    for delay in (0.05, 0.2, 0.4):
        proc = subprocess.Popen([TIERCTL, "--db", str(ctl.db), "import", str(big)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env())
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        after = ctl.export()
        n_users = len(json.loads(after)["users"])
        assert after == before or n_users == len(doc["users"]), "a partial import is visible"
        with sqlite3.connect(str(ctl.db)) as db:
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        if after != before:
            # The import committed before the kill: put the old catalog back.
            (tmp_path / "before.json").write_text(before)
            ctl("import", tmp_path / "before.json")
            assert ctl.export() == before


def test_readers_do_not_block_tierctl(ctl):
    # A proxy's open read transaction (WAL): tierctl still writes at once.
    db = sqlite3.connect(str(ctl.db), isolation_level=None)
    db.execute("BEGIN")
    db.execute("SELECT count(*) FROM plans").fetchone()
    t0 = time.monotonic()
    ctl("plan", "add", "while-reading")
    assert time.monotonic() - t0 < 2
    # The reader's snapshot is unchanged until it ends its transaction.
    assert db.execute("SELECT count(*) FROM plans WHERE name = 'while-reading'").fetchone()[0] == 0
    db.execute("COMMIT")
    assert db.execute("SELECT count(*) FROM plans WHERE name = 'while-reading'").fetchone()[0] == 1
    db.close()


def test_locked_catalog_fails_cleanly(ctl):
    # Another writer holds the lock longer than tierctl waits (5 s): exit 1, one line.
    db = sqlite3.connect(str(ctl.db), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        t0 = time.monotonic()
        cp = ctl("plan", "add", "blocked", rc=1)
        assert "locked" in cp.stderr
        assert 3 < time.monotonic() - t0 < 30
        # Readers are not blocked by the writer.
        assert "free" in ctl("plan", "list").stdout
    finally:
        db.execute("ROLLBACK")
        db.close()
    ctl("plan", "show", "blocked", rc=1)
