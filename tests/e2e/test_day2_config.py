"""Day two, configuration and diagnostics (SPEC "Additions of 2026-11-28", "Day two"):
a flag beats an environment variable, which beats the file; both programs read the
catalog's path from TIERPROXY_PLANS_DB; `--check` reports every bad value in one run and
warns (exit 0) on a Redis or upstream it cannot reach and a listen address in use; every
stderr line is one JSON object, filtered by [log] level; refused values are quoted (never
a password); `listen` takes host names; the access log names why an upstream failed and
tells a missing key from an invalid one."""
import json
import os
import signal
import socket
import subprocess

from conftest import (SLOW, TIERCTL_BIN, TIERPROXY_BIN, Catalog, _clean_env, free_port,
                      port_open, wait_until, write_ini)
from fleet_helpers import ws_try

LEVELS = ("error", "warn", "info", "debug")


def json_lines(text):
    """Every line of text as a JSON object with time, level and msg; a line that is not
    fails the test, quoted."""
    out = []
    for ln in text.splitlines():
        try:
            obj = json.loads(ln)
        except ValueError:
            raise AssertionError("a stderr line is not JSON: %r\n--- stderr ---\n%s" % (ln, text[-3000:]))
        assert isinstance(obj, dict), "a stderr line is not a JSON object: %r" % ln
        assert isinstance(obj.get("time"), str) and obj.get("level") in LEVELS and \
            isinstance(obj.get("msg"), str), "a stderr line without time, level and msg: %r" % ln
        out.append(obj)
    return out


def lines_as_said(text):
    """Every line of text as a dict: a JSON object as it is, a plain line (what tierproxy
    wrote before its lines were JSON) as its level guessed and its text as msg. So a test
    checks what is said first; json_lines checks the form."""
    out = []
    for ln in text.splitlines():
        try:
            obj = json.loads(ln)
            if isinstance(obj, dict) and "msg" in obj:
                out.append(obj)
                continue
        except ValueError:
            pass
        level = "warn" if "warning" in ln else "info" if "configuration ok" in ln else "error"
        out.append({"level": level, "msg": ln})
    return out


def levels_seen(text):
    """The level of each stderr line; "plain" for a line that is not a JSON object."""
    seen = []
    for ln in text.splitlines():
        try:
            seen.append(json.loads(ln).get("level", "none"))
        except (ValueError, AttributeError):
            seen.append("plain")
    return seen


def tierproxy(args, env=None, cwd=None):
    return subprocess.run([TIERPROXY_BIN] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=60 * SLOW, env=_clean_env(env), cwd=cwd, stdin=subprocess.DEVNULL)


def tierctl(args, cwd, env=None):
    return subprocess.run([TIERCTL_BIN] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=60 * SLOW, env=_clean_env(env), cwd=str(cwd), stdin=subprocess.DEVNULL)


def line_of(path, text):
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if ln.startswith(text):
            return i
    raise AssertionError("%r not in %s" % (text, path))


def stop(p):
    p.signal(signal.SIGTERM)
    p.proc.wait(20 * SLOW)
    return p.stderr()


# ------------------------------------------------------------------ precedence

def test_flag_beats_environment_beats_file_for_listen_upstream_and_db(catalog, proxies, upstream, tmp_path):
    """Each of listen, upstream and db set three ways: the flag's value serves. Then with no
    flags, the environment's value serves, not the file's."""
    keys = {}
    dbs = {}
    for origin in ("file", "env", "flag"):
        c = Catalog(tmp_path / ("%s.db" % origin)).init()
        keys[origin] = c.user_key("free")[1]
        dbs[origin] = str(c.path)
    ports = {origin: free_port() for origin in ("file", "env", "flag")}
    dead = "http://127.0.0.1:%d" % free_port()

    def started(env, args, want):
        ini = proxies.config(catalog, upstream=dead, store="memory")
        ini["proxy"]["listen"] = "127.0.0.1:%d" % ports["file"]
        ini["plans"]["db"] = dbs["file"]
        p = proxies.start_ini(ini, env=env, args=args, wait=False)
        assert wait_until(lambda: any(port_open(port) for port in ports.values()) or p.proc.poll() is not None,
                          15 * SLOW), "nothing listens\n" + p.stderr()[-2000:]
        listening = [origin for origin, port in ports.items() if port_open(port)]
        assert listening == [want], "listen: the %s's value should serve, the proxy listens on the %s's port" % (
            want, " and ".join(listening) or "no")
        p.port = ports[want]
        for origin, key in keys.items():
            r = p.get("/x", key=key)
            wanted = 200 if origin == want else 401
            assert r.status == wanted, "db and upstream: the %s's value should serve; the key of the %s's catalog " \
                "got %r" % (want, origin, r)
        return p

    p = started({"TIERPROXY_PROXY_LISTEN": "127.0.0.1:%d" % ports["env"], "TIERPROXY_PROXY_UPSTREAM": dead,
                 "TIERPROXY_PLANS_DB": dbs["env"]},
                ["--listen", "127.0.0.1:%d" % ports["flag"], "--upstream", upstream.url, "--db", dbs["flag"]],
                "flag")
    stop(p)
    started({"TIERPROXY_PROXY_LISTEN": "127.0.0.1:%d" % ports["env"], "TIERPROXY_PROXY_UPSTREAM": upstream.url,
             "TIERPROXY_PLANS_DB": dbs["env"]}, [], "env")


def test_tierctl_reads_the_catalog_path_from_TIERPROXY_PLANS_DB(tmp_path):
    """--db, then $TIERPROXY_PLANS_DB (the proxy's variable), then $TIERPROXY_DB (kept as a
    fallback), then [plans] db of --config FILE, then ./plans.db."""
    def init(env, *args):
        cp = tierctl(list(args) + ["init"], tmp_path, env)
        assert cp.returncode == 0, cp
        made = sorted(p.name for p in tmp_path.glob("*.db"))
        for p in tmp_path.glob("*.db"):
            p.unlink()
        return made

    conf = tmp_path / "proxy.ini"
    conf.write_text("[plans]\ndb = %s\n" % (tmp_path / "from-config.db"))
    assert init({"TIERPROXY_PLANS_DB": str(tmp_path / "plans-db.db")}) == ["plans-db.db"], \
        "tierctl ignores TIERPROXY_PLANS_DB"
    assert init({"TIERPROXY_PLANS_DB": str(tmp_path / "plans-db.db"),
                 "TIERPROXY_DB": str(tmp_path / "old.db")}) == ["plans-db.db"]
    assert init({"TIERPROXY_DB": str(tmp_path / "old.db")}) == ["old.db"]
    assert init({"TIERPROXY_PLANS_DB": str(tmp_path / "plans-db.db")},
                "--db", tmp_path / "flag.db") == ["flag.db"]
    assert init({}, "--config", conf) == ["from-config.db"], "tierctl ignores [plans] db of --config FILE"
    assert init({"TIERPROXY_PLANS_DB": str(tmp_path / "plans-db.db")}, "--config", conf) == ["plans-db.db"]
    assert init({}) == ["plans.db"]


# ------------------------------------------------------------------ --check

def errors_naming(lines, where):
    return [ln for ln in lines if ln["level"] == "error" and where in ln["msg"]]


def test_check_reports_three_bad_values_in_the_file_in_one_run(catalog, proxies, tmp_path):
    ini = proxies.config(catalog, store="memory")
    ini["proxy"]["workers"] = "lots"
    ini["proxy"]["max_body_bytes"] = "-5"
    ini["limits"]["on_store_error"] = "maybe"
    path = tmp_path / "bad.ini"
    write_ini(path, ini)
    cp = tierproxy(["-c", path, "--check"])
    assert cp.returncode == 1, cp
    lines = lines_as_said(cp.stderr)
    for key, value in (("workers", "lots"), ("max_body_bytes", "-5"), ("on_store_error", "maybe")):
        where = "%s:%d" % (path, line_of(path, key + " ="))
        named = errors_naming(lines, where)
        assert len(named) == 1, "want one error line naming %s (%s = %s):\n%s" % (where, key, value, cp.stderr)
        assert key in named[0]["msg"] and '"%s"' % value in named[0]["msg"], named[0]
    assert not [ln for ln in lines if "configuration ok" in ln["msg"]], cp.stderr
    json_lines(cp.stderr)


def test_check_reports_a_bad_flag_variable_and_file_line_together(catalog, proxies, tmp_path):
    ini = proxies.config(catalog, store="memory")
    ini["proxy"]["workers"] = "lots"
    path = tmp_path / "bad.ini"
    write_ini(path, ini)
    cp = tierproxy(["-c", path, "--upstream", "ftp://127.0.0.1:21", "--check"],
                   env={"TIERPROXY_LIMITS_HEADERS": "fancy"})
    assert cp.returncode == 1, cp
    lines = lines_as_said(cp.stderr)
    for where, value in (("%s:%d" % (path, line_of(path, "workers =")), "lots"), ("--upstream", "ftp://127.0.0.1:21"),
                         ("TIERPROXY_LIMITS_HEADERS", "fancy")):
        named = errors_naming(lines, where)
        assert len(named) == 1 and '"%s"' % value in named[0]["msg"], \
            "want one error line naming %s and quoting %r:\n%s" % (where, value, cp.stderr)
    json_lines(cp.stderr)


def test_check_warns_on_a_dead_redis_a_dead_upstream_and_a_port_in_use(catalog, proxies, tmp_path):
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        held.bind(("127.0.0.1", 0))
        held.listen(1)
        taken = held.getsockname()[1]
        dead_upstream = "http://127.0.0.1:%d" % free_port()
        ini = proxies.config(catalog, upstream=dead_upstream, store="memory")
        ini["proxy"]["listen"] = "127.0.0.1:%d" % taken
        ini["limits"].update(store="redis", redis="redis://127.0.0.1:%d/0" % free_port())
        path = tmp_path / "warn.ini"
        write_ini(path, ini)
        cp = tierproxy(["-c", path, "--check"])
    finally:
        held.close()
    assert cp.returncode == 0, cp
    lines = lines_as_said(cp.stderr)
    warnings = [ln for ln in lines if ln["level"] == "warn"]
    for what, why in (("[limits] redis", "refused"), ("[proxy] upstream", "refused"), ("[proxy] listen", "in use")):
        said = [w for w in warnings if what in w["msg"] and why in w["msg"].lower()]
        assert len(said) == 1, "want one warning about %s (%s):\n%s" % (what, why, cp.stderr)
    assert [ln for ln in lines if "configuration ok" in ln["msg"]], cp.stderr
    json_lines(cp.stderr)


# ------------------------------------------------------------------ stderr as JSON, [log] level

def test_every_stderr_line_of_a_run_is_one_json_object(catalog, proxies, redis_factory):
    """Start, a reload, a log reopen, a store outage and its end, SIGTERM: each line one
    JSON object with time, level and msg."""
    rd = redis_factory()
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, store="redis", redis=rd, proxy={"upstream_tls_verify": "no"})
    assert p.get("/a", key=key).status == 200
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: "reloaded" in p.stderr(), 5 * SLOW), p.stderr()
    p.signal(signal.SIGUSR1)
    assert wait_until(lambda: "SIGUSR1" in p.stderr(), 5 * SLOW), p.stderr()
    rd.stop()
    assert wait_until(lambda: p.get("/down", key=key).status == 200 and "unreachable" in p.stderr(), 5 * SLOW), \
        p.stderr()
    rd.start()
    assert wait_until(lambda: p.get("/back", key=key).status == 200 and "back" in p.stderr(), 10 * SLOW), \
        p.stderr()
    err = stop(p)
    assert p.proc.returncode == 0, err
    lines = json_lines(err)
    said = " | ".join(ln["msg"] for ln in lines)
    for what in ("listening", "reloaded", "SIGUSR1", "unreachable", "back", "SIGTERM"):
        assert what in said, "no line says %r: %s" % (what, said)


def test_log_level_error_hides_warnings_and_debug_shows_more(catalog, proxies):
    catalog.plan("one", "--rate", "1/min")
    _, key = catalog.user_key("one")

    def run(level):
        p = proxies.start(catalog, store="memory", proxy={"upstream_tls_verify": "no"}, log={"level": level})
        assert p.get("/a", key=key).status == 200
        assert p.get("/a", key=key).status == 429      # a rejection warning
        return p, stop(p)

    _, quiet = run("error")
    assert [lv for lv in levels_seen(quiet) if lv != "error"] == [], \
        "level error still writes other lines:\n%s" % quiet
    _, normal = run("info")
    normal_lines = json_lines(normal)
    assert {"warn", "info"} <= {ln["level"] for ln in normal_lines}, normal
    assert "debug" not in {ln["level"] for ln in normal_lines}, normal
    p, verbose = run("debug")
    verbose_lines = json_lines(verbose)
    debug = [ln for ln in verbose_lines if ln["level"] == "debug"]
    assert debug and len(verbose_lines) > len(normal_lines), verbose
    # what debug adds: where each setting came from
    listen_from = "%s:%d" % (p.ini_path, line_of(p.ini_path, "listen ="))
    assert [ln for ln in debug if "[proxy] listen" in ln["msg"] and listen_from in ln["msg"]], verbose


# ------------------------------------------------------------------ values and host names

def test_a_refused_value_is_quoted_without_its_password(catalog, proxies, tmp_path):
    secret = "s3cret-staple-42"
    ini = proxies.config(catalog, store="memory")
    ini["limits"].update(store="redis", redis="http://alice:%s@127.0.0.1:6379/0" % secret)
    path = tmp_path / "url.ini"
    write_ini(path, ini)
    cp = tierproxy(["-c", path, "--check"])
    assert cp.returncode == 1, cp
    named = errors_naming(lines_as_said(cp.stderr), "%s:%d" % (path, line_of(path, "redis =")))
    assert len(named) == 1, cp.stderr
    assert '"http://alice:***@127.0.0.1:6379/0"' in named[0]["msg"], named[0]
    assert secret not in cp.stdout + cp.stderr
    json_lines(cp.stderr)
    good = tmp_path / "good.ini"
    write_ini(good, proxies.config(catalog, store="memory"))
    cp = tierproxy(["-c", good, "--redis", "redis://:%s@127.0.0.1:99999/0" % secret, "--check"])
    assert cp.returncode == 1, cp
    named = errors_naming(lines_as_said(cp.stderr), "--redis")
    assert len(named) == 1 and '"redis://:***@127.0.0.1:99999/0"' in named[0]["msg"], cp.stderr
    assert secret not in cp.stdout + cp.stderr
    json_lines(cp.stderr)


def test_listen_takes_a_host_name(catalog, proxies):
    _, key = catalog.user_key("free")
    port, admin = free_port(), free_port()
    p = proxies.start(catalog, store="memory", proxy={"listen": "localhost:%d" % port},
                      admin={"listen": "localhost:%d" % admin}, wait=False)
    assert wait_until(lambda: port_open(port) or p.proc.poll() is not None, 15 * SLOW), p.stderr()
    if p.proc.poll() is not None:
        p.expected_rc = p.proc.returncode
    assert p.proc.poll() is None, "tierproxy refused listen = localhost:%d:\n%s" % (port, p.stderr())
    p.wait_ready()
    assert p.get("/x", key=key).status == 200
    assert p.admin("/health").status == 200


def test_listen_on_a_name_that_does_not_resolve_is_refused_naming_it(catalog, proxies, tmp_path):
    ini = proxies.config(catalog, store="memory")
    ini["proxy"]["listen"] = "no-such-host.invalid:%d" % free_port()
    path = tmp_path / "name.ini"
    write_ini(path, ini)
    cp = tierproxy(["-c", path, "--check"])
    assert cp.returncode == 1, cp
    named = errors_naming(lines_as_said(cp.stderr), "%s:%d" % (path, line_of(path, "listen =")))
    assert len(named) == 1 and '"no-such-host.invalid"' in named[0]["msg"], cp.stderr
    json_lines(cp.stderr)


# ------------------------------------------------------------------ the access log

def test_access_log_names_the_upstream_error_and_a_missing_or_invalid_key(catalog, proxies, upstream):
    _, key = catalog.user_key("free")
    dead = "http://127.0.0.1:%d" % free_port()
    p = proxies.start(catalog, store="memory", upstream=dead)
    assert p.get("/dead", key=key).status == 502
    assert p.get("/nokey").status == 401
    assert p.get("/badkey", key="tp_" + "0" * 48).status == 401
    r = ws_try(p.port, "/ws-dead", key)
    assert getattr(r, "status", None) == 502, r
    slow = proxies.start(catalog, store="memory", upstream=upstream, proxy={"upstream_timeout_ms": 300})
    assert slow.get("/slow/3000", key=key).status == 504

    def line(proxy, path):
        assert wait_until(lambda: [ln for ln in proxy.access_log_lines() if ln.get("path") == path], 5 * SLOW)
        (ln,) = [ln for ln in proxy.access_log_lines() if ln.get("path") == path]
        return ln
    dead_line = line(p, "/dead")
    assert "refused" in (dead_line.get("upstream_error") or "").lower(), dead_line
    ws_line = line(p, "/ws-dead")
    assert "refused" in (ws_line.get("upstream_error") or "").lower(), ws_line
    slow_line = line(slow, "/slow/3000")
    assert slow_line["status"] == 504 and slow_line.get("upstream_error"), slow_line
    assert line(p, "/nokey")["decision"] == "missing_key", line(p, "/nokey")
    assert line(p, "/badkey")["decision"] == "invalid_key", line(p, "/badkey")
    # an answered request carries no upstream_error
    ok = proxies.start(catalog, store="memory", upstream=upstream)
    assert ok.get("/fine", key=key).status == 200
    assert "upstream_error" not in line(ok, "/fine"), line(ok, "/fine")
