"""SPEC "Faults keep their promises", the catalog's part (issue 22): tierctl refuses names and
labels that are not valid UTF-8 and ids beyond 2^53, and whatever a catalog holds, `export`
and `--json` can write it; `user limit add` carries over the count of the plan's limit it
replaces; SIGHUP with an empty configuration file keeps the running configuration."""
import json
import signal
import socket
import sqlite3
import subprocess
import time

import pytest

import conftest
from conftest import SLOW, Catalog, _clean_env, wait_until, write_ini
from fleet_helpers import check_concurrency_429, http_send, wait_stat, ws_upstream  # noqa: F401

ID_MAX = 2 ** 53            # JSON's exact integers end here


def tierctl(catalog, *args, stdin=None):
    """`tierctl --db CATALOG ARGS...` with arguments as bytes where a test needs bytes that are
    not UTF-8; stdout and stderr as bytes."""
    argv = [conftest.CATALOG_TIERCTL_BIN, "--db", str(catalog.path)]
    argv += [a if isinstance(a, bytes) else str(a) for a in args]
    return subprocess.run(argv, capture_output=True, timeout=60, env=_clean_env(),
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def export(catalog):
    cp = tierctl(catalog, "export")
    assert cp.returncode == 0, "export failed: %r" % cp.stderr
    return cp.stdout


def assert_refused(cp, what, words=()):
    """A refusal as README says: exit 1 with one line on stderr, or exit 2 with the reason and
    the usage line; the reason names what was refused; stderr is UTF-8 text."""
    assert cp.returncode in (1, 2), "%s: accepted (exit %d)\nstdout: %r\nstderr: %r" % (
        what, cp.returncode, cp.stdout[:300], cp.stderr[:300])
    try:
        err = cp.stderr.decode("utf-8")
    except UnicodeDecodeError:
        raise AssertionError("%s: stderr is not UTF-8: %r" % (what, cp.stderr[:300]))
    lines = err.splitlines()
    want = 1 if cp.returncode == 1 else 2
    assert len(lines) == want and err.endswith("\n"), "%s: exit %d wants %d line(s) on stderr: %r" % (
        what, cp.returncode, want, err[:600])
    assert lines[0].startswith("tierctl: "), (what, err)
    if cp.returncode == 2:
        assert lines[1].startswith("usage: "), (what, err)
    for w in words:
        assert w in lines[0], "%s: the reason does not name %r: %r" % (what, w, lines[0])
    return lines[0]


def assert_writes_json(catalog, *args):
    cp = tierctl(catalog, *args)
    assert cp.returncode == 0, "%s failed: %r" % (" ".join(map(str, args)), cp.stderr[:500])
    return json.loads(cp.stdout.decode("utf-8"))   # strict: the output is UTF-8 JSON


# ------------------------------------------------------------------ names and labels: UTF-8

BAD_TEXT = [
    b"lap\xfftop",                # a byte UTF-8 never uses
    b"caf\xe9",                   # Latin-1
    b"\xc3",                      # a sequence cut short
    b"\xc0\xaf",                  # an overlong '/'
    b"\xed\xa0\x80",              # a UTF-16 surrogate
    b"\xf4\x90\x80\x80",          # past U+10FFFF
]
BAD = b"caf\xe9"


def refusals():
    """(what, argv) of every command that takes a name or label, each with one not UTF-8."""
    rows = [("label %r" % t, ["key", "create", "alice", "--label", t]) for t in BAD_TEXT]
    rows += [
        ("plan add NAME", ["plan", "add", BAD, "--rate", "1/s"]),
        ("plan set NAME", ["plan", "set", BAD, "--rate", "1/s"]),
        ("plan show NAME", ["plan", "show", BAD]),
        ("plan show NAME --json", ["plan", "show", BAD, "--json"]),
        ("plan remove NAME", ["plan", "remove", BAD]),
        ("limit add PLAN", ["limit", "add", BAD, "--rate", "1/s"]),
        ("limit add --route", ["limit", "add", "free", "--rate", "1/s", "--route", b"GET /caf\xe9"]),
        ("cost set PLAN", ["cost", "set", BAD, "POST /x", "2"]),
        ("cost set ROUTE", ["cost", "set", "free", b"POST /\xff", "2"]),
        ("user add ID", ["user", "add", BAD, "--plan", "free"]),
        ("user add --plan", ["user", "add", "bob", "--plan", BAD]),
        ("user set ID", ["user", "set", BAD, "--plan", "free"]),
        ("user set --plan", ["user", "set", "alice", "--plan", BAD]),
        ("user list --plan", ["user", "list", "--plan", BAD, "--json"]),
        ("user show ID", ["user", "show", BAD, "--json"]),
        ("user remove ID", ["user", "remove", BAD]),
        ("user limit add USER", ["user", "limit", "add", BAD, "--rate", "1/s"]),
        ("user limit remove USER", ["user", "limit", "remove", BAD, "1"]),
        ("key create USER", ["key", "create", BAD]),
        ("key list USER", ["key", "list", BAD, "--json"]),
        ("usage USER", ["usage", BAD, "--redis", "redis://127.0.0.1:1/0"]),
        ("simulate --plan", ["simulate", "/dev/null", "--plan", BAD]),
    ]
    return rows


def test_names_and_labels_not_utf8_are_refused_and_json_still_writes(catalog, tmp_path):
    catalog.run("user", "add", "alice", "--plan", "free")
    catalog.key("alice", label="laptop")
    before = export(catalog)
    for what, argv in refusals():
        cp = tierctl(catalog, *argv)
        assert_refused(cp, what)
        assert export(catalog) == before, "%s changed the catalog" % what
    # ... and the import: raw bytes, or escapes of no character
    doc = json.loads(before)
    for what, label in (("a raw 0xff byte", b'"lap\xfftop"'), ("a lone surrogate", b'"\\ud800"')):
        doc["api_keys"][0]["label"] = "@@LABEL@@"
        f = tmp_path / "bad.json"
        f.write_bytes(json.dumps(doc).encode().replace(b'"@@LABEL@@"', label))
        assert_refused(tierctl(catalog, "import", f), "import with %s in a label" % what)
        assert export(catalog) == before, "the import of %s changed the catalog" % what
    # whatever was accepted, every JSON output writes
    for args in (["export"], ["key", "list", "--json"], ["user", "show", "alice", "--json"],
                 ["plan", "list", "--json"], ["user", "list", "--json"]):
        assert_writes_json(catalog, *args)
    # valid UTF-8 beyond ASCII is a label like any other
    label = "caf\u00e9 \u2713 \U0001F511"
    catalog.key("alice", label=label)
    keys = assert_writes_json(catalog, "key", "list", "alice", "--json")
    assert [k["label"] for k in keys] == ["laptop", label], keys


def test_an_older_catalogs_label_not_utf8_still_exports_and_imports(catalog, tmp_path):
    """A label an older tierctl took (invalid UTF-8): export and --json write it with '?' in
    place of each byte that is no UTF-8 (its length kept), say so on stderr, and the export
    imports whole."""
    catalog.run("user", "add", "alice", "--plan", "free")
    catalog.key("alice", label="laptop")
    catalog.key("alice", label="phone")
    db = sqlite3.connect(str(catalog.path))
    db.execute("UPDATE api_keys SET label = CAST(? AS TEXT) WHERE label = 'laptop'",
               (b"lap\xfftop \xc3\xa9\xe9",))
    db.commit()
    db.close()
    cp = tierctl(catalog, "export")
    assert cp.returncode == 0, "export of an older catalog failed: %r" % cp.stderr
    doc = json.loads(cp.stdout.decode("utf-8"))
    assert [k["label"] for k in doc["api_keys"]] == ["lap?top \u00e9?", "phone"], doc["api_keys"]
    warning = cp.stderr.decode("utf-8")
    assert len(warning.splitlines()) == 1 and "label" in warning and "key 1" in warning, warning
    for args in (["key", "list", "--json"], ["key", "list", "alice", "--json"],
                 ["user", "show", "alice", "--json"]):
        shown = assert_writes_json(catalog, *args)
        keys = shown["keys"] if isinstance(shown, dict) else shown
        assert keys[0]["label"] == "lap?top \u00e9?", (args, keys)
    assert tierctl(catalog, "key", "list").returncode == 0
    # never lose the catalog: the export is a whole one
    f = tmp_path / "catalog.json"
    f.write_bytes(cp.stdout)
    copy = Catalog(tmp_path / "copy.db")
    copy.run("import", str(f))
    assert json.loads(export(copy)) == doc


# ------------------------------------------------------------------ ids up to 2^53

def id_fields(doc):
    """(where, field, setter) of every id an export holds."""
    def at(obj, name):
        return lambda v: obj.__setitem__(name, v)
    yield "plans[0]", "id", at(doc["plans"][0], "id")
    yield "plans[0].limits[0]", "id", at(doc["plans"][0]["limits"][0], "id")
    yield "users[0].limits[0]", "id", at(doc["users"][0]["limits"][0], "id")
    yield "api_keys[0]", "id", at(doc["api_keys"][0], "id")
    for table in ("plans", "limits", "api_keys"):
        yield "last_ids", table, at(doc["last_ids"], table)


def test_import_refuses_ids_beyond_2_53(catalog, tmp_path):
    catalog.run("user", "add", "alice", "--plan", "free")
    catalog.run("user", "limit", "add", "alice", "--quota", "10/day")
    catalog.key("alice")
    before = export(catalog)
    n_fields = len(list(id_fields(json.loads(before))))
    for big in (2 ** 63 - 1, ID_MAX + 1):
        for i in range(n_fields):
            doc = json.loads(before)
            where, field, set_id = list(id_fields(doc))[i]
            set_id(big)
            f = tmp_path / "big.json"
            f.write_text(json.dumps(doc))
            what = "%s.%s = %d" % (where, field, big)
            cp = tierctl(catalog, "import", f)
            reason = assert_refused(cp, what, words=[where, '"%s"' % field])
            assert cp.returncode == 1, (what, reason)
            assert export(catalog) == before, "%s changed the catalog" % what
    # the catalog still takes new limits (the issue: "database or disk is full" from here on)
    out = catalog.limit("free", "--rate", "1/s").stdout
    assert 0 < int(out.split()[0]) <= ID_MAX, out


def test_ids_tierctl_assigns_stay_within_2_53(catalog, tmp_path):
    catalog.run("user", "add", "alice", "--plan", "free")
    doc = json.loads(export(catalog))
    doc["last_ids"] = {"plans": ID_MAX, "limits": ID_MAX, "api_keys": ID_MAX}   # the last allowed
    f = tmp_path / "top.json"
    f.write_text(json.dumps(doc))
    catalog.run("import", str(f))
    before = export(catalog)
    for what, argv, word in (
            ("plan add", ["plan", "add", "gold", "--rate", "1/s"], "plan"),
            ("limit add", ["limit", "add", "free", "--rate", "1/s"], "limit"),
            ("user limit add", ["user", "limit", "add", "alice", "--quota", "5/day"], "limit"),
            ("key create", ["key", "create", "alice"], "key")):
        cp = tierctl(catalog, *argv)
        reason = assert_refused(cp, what, words=[word, str(ID_MAX)])
        assert cp.returncode == 1 and "full" not in reason, (what, reason)
        assert not cp.stdout, "%s printed %r though it was refused" % (what, cp.stdout)
        assert export(catalog) == before, "%s changed the catalog" % what
    # an id given on the command line beyond 2^53 is no id
    for argv in (["key", "revoke", ID_MAX + 1], ["limit", "remove", "free", ID_MAX + 1],
                 ["limit", "set", "free", ID_MAX + 1, "--rate", "2/s"],
                 ["user", "limit", "remove", "alice", ID_MAX + 1]):
        assert_refused(tierctl(catalog, *argv), argv[:2])
        assert export(catalog) == before


# ------------------------------------------------------------------ a user's own limit keeps the count

def wait_out_utc_midnight():
    """A day's quota must not roll over mid-test: wait past midnight UTC when it is near."""
    now = time.time()
    left = 86400 - now % 86400
    if left < 30 * SLOW:
        time.sleep(left + 1)


def serving(p, catalog):
    """Returns once the proxy serves the catalog as it is now: a key made after every change
    before it works once the proxy has loaded a snapshot with all of them."""
    _, key = catalog.user_key("probe")
    assert wait_until(lambda: p.get("/probe", key=key).status == 200, 10 * SLOW, 0.05), \
        "the proxy did not load the catalog's changes"


def usage_of(catalog, p, user, kind):
    doc = json.loads(catalog.run("usage", user, "--json", "--config", str(p.ini_path)).stdout)
    found = [lim for lim in doc["limits"] if lim["kind"] == kind]
    assert len(found) == 1, doc
    return found[0]


def own_limit(catalog, user, *flags):
    return catalog.run("user", "limit", "add", user, *flags).stdout.split()[0]


def test_user_quota_carries_the_plans_count_over(catalog, start_proxy, store):
    wait_out_utc_midnight()
    catalog.plan("probe", "--rate", "100000/min")
    plan = catalog.plan("daily", "--quota", "5/day")
    user, key = catalog.user_key(plan)
    p = start_proxy(catalog)
    assert [p.get("/x", key=key).status for _ in range(6)] == [200] * 5 + [429]
    lid = own_limit(catalog, user, "--quota", "7/day")
    serving(p, catalog)
    if store == "redis":
        q = usage_of(catalog, p, user, "quota")
        assert (q["used"], q["limit"], q["remaining"], q["source"]) == (5, 7, 2, "user"), q
    statuses = [p.get("/x", key=key).status for _ in range(4)]
    assert statuses == [200, 200, 429, 429], \
        "5 of the plan's 5/day used, then the user's own 7/day: 2 more, not %d: %r" % (
            statuses.count(200), statuses)
    # the plan's 5/day again: it sees the 7 used
    catalog.run("user", "limit", "remove", user, lid)
    serving(p, catalog)
    assert p.get("/x", key=key).status == 429
    if store == "redis":
        q = usage_of(catalog, p, user, "quota")
        assert (q["used"], q["limit"], q["source"]) == (5, 5, "plan"), q


def test_user_rate_carries_the_plans_count_over(catalog, start_proxy, store):
    catalog.plan("probe", "--rate", "100000/min")
    # a sustained rate first, then the burst rate of the same kind: a user rate of one
    # minute takes the minute's count (a fixed window's state is no sliding log's)
    plan = catalog.plan("minute", "--rate", "1000/h", "--algorithm", "fixed-window")
    catalog.limit(plan, "--rate", "5/min")
    user, key = catalog.user_key(plan)
    p = start_proxy(catalog)
    assert [p.get("/x", key=key).status for _ in range(6)] == [200] * 5 + [429]
    own_limit(catalog, user, "--rate", "7/min")
    serving(p, catalog)
    if store == "redis":
        r = usage_of(catalog, p, user, "rate")
        assert (r["used"], r["limit"], r["remaining"]) == (5, 7, 2), r
    statuses = [p.get("/x", key=key).status for _ in range(4)]
    assert statuses == [200, 200, 429, 429], \
        "5 of the plan's 5/min used, then the user's own 7/min: 2 more, not %d: %r" % (
            statuses.count(200), statuses)


def hold(p, key):
    s = socket.create_connection(("127.0.0.1", p.port), timeout=30)
    http_send(s, "GET", "/hang", key=key)
    return s


def test_user_concurrency_counts_the_requests_in_flight(catalog, start_proxy, store, ws_upstream):
    catalog.plan("probe", "--rate", "100000/min")
    plan = catalog.plan("two", "--rate", "100000/min", "--concurrency", "2")
    user, key = catalog.user_key(plan)
    p = start_proxy(catalog, upstream=ws_upstream)
    held = []
    try:
        held += [hold(p, key), hold(p, key)]
        assert wait_stat(ws_upstream, "open", user, 2, 5 * SLOW) == 2, "the two requests never arrived"
        check_concurrency_429(p.get("/slow/0", key=key))
        own_limit(catalog, user, "--concurrency", "3")
        serving(p, catalog)
        held.append(hold(p, key))
        assert wait_stat(ws_upstream, "open", user, 3, 5 * SLOW) == 3, "the third request never arrived"
        r = p.get("/slow/0", key=key)
        assert r.status == 429, "2 in flight under the plan's 2, then the user's own 3: " \
            "a 4th in flight was admitted: %r" % r
        check_concurrency_429(r)
    finally:
        for s in held:
            s.close()


# ------------------------------------------------------------------ SIGHUP with an empty file

@pytest.mark.parametrize("empty", [b"", b" \n\n\t\n", b"; truncated\n# by an editor\n\n",
                                   b"[proxy]\n\n[auth]\n"],
                         ids=["zero-bytes", "whitespace", "comments", "sections"])
def test_sighup_with_an_empty_file_keeps_the_running_configuration(catalog, proxies, empty):
    catalog.plan("roomy", "--rate", "1000/min")
    _, key = catalog.user_key("roomy")
    p = proxies.start(catalog, proxy={"exempt_paths": "/open"}, auth={"key_header": "X-Api-Key"},
                      limits={"headers": "draft"})
    mine = [("X-Api-Key", key)]

    def running_config_in_force():
        ok = p.get("/open/x").status == 200                          # exempt: no key needed
        r = p.get("/x", headers=mine)                                 # the key in X-Api-Key
        return ok and r.status == 200 and r.echo["upstream_port"] > 0 and \
            r.header("RateLimit-Limit") == "1000"
    assert running_config_in_force()
    good = p.ini_path.read_bytes()
    before = p.stderr()
    p.ini_path.write_bytes(empty)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: len(p.stderr()) > len(before), 5 * SLOW), "no line on SIGHUP"
    time.sleep(0.3)
    new = p.stderr()[len(before):]
    assert p.proc.poll() is None, "the proxy exited on SIGHUP"
    assert running_config_in_force(), \
        "after SIGHUP with an empty file: exempt path %d, key in X-Api-Key %d; stderr: %r" % (
            p.get("/open/x").status, p.get("/x", headers=mine).status, new)
    lines = new.splitlines()
    assert len(lines) == 1 and "SIGHUP" in lines[0] and str(p.ini_path) in lines[0] and \
        "keep" in lines[0], new
    # the file written again: a real reload
    p.ini_path.write_bytes(good)
    ini = dict(p.ini, limits=dict(p.ini["limits"], headers="x"))
    write_ini(p.ini_path, ini)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: p.get("/x", headers=mine).header("X-RateLimit-Limit") == "1000",
                      5 * SLOW, 0.1), "a good file after the empty one was not taken"
