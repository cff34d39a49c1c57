"""What an operator reads in the first hour: stdout holds the access log alone, SIGUSR1
reopens the access log file for logrotate, rejection warnings are summed up instead of
flooding stderr, and --check refuses every configuration a start would refuse, naming
where the bad value came from (file and line, flag, or environment variable)."""
import json
import os
import signal
import subprocess
import threading
import time

from conftest import (SLOW, TIERPROXY_BIN, _clean_env, free_port, http_request, wait_until,
                      write_ini)


def stdout_lines(p):
    return p.stdout_path.read_text(errors="replace").splitlines()


def json_lines(text):
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def warnings_for(p, user):
    out = []
    for ln in p.stderr().splitlines():
        if ln.startswith("{") and '"warn"' in ln:
            w = json.loads(ln)
            if w.get("user_id") == user:
                out.append(w)
    return out


# ------------------------------------------------------------------ stdout and stderr

def test_stdout_carries_only_access_log_lines(proxies, catalog):
    # With access = stdout, `tierproxy | jq` must work: the startup line, warnings and
    # reload notices go to stderr; stdout holds one JSON access entry per request.
    catalog.plan("one", "--rate", "1/min")
    user, key = catalog.user_key("one")
    p = proxies.start(catalog, store="memory", log={"access": "stdout"})
    assert p.get("/a", key=key).status == 200
    assert p.get("/a", key=key).status == 429          # a warning line
    p.signal(signal.SIGHUP)                            # a reload notice
    assert wait_until(lambda: "reloaded" in p.stderr(), 5 * SLOW), p.stderr()
    assert p.get("/b").status == 401
    assert wait_until(lambda: len([ln for ln in stdout_lines(p) if ln.strip()]) >= 3,
                      5 * SLOW), stdout_lines(p)
    assert not p.stop()
    lines = [ln for ln in stdout_lines(p) if ln.strip()]
    for ln in lines:
        assert ln.startswith("{"), "not an access-log line on stdout: %r" % ln
        entry = json.loads(ln)
        assert "status" in entry and "method" in entry and "level" not in entry, entry
    assert sorted(json.loads(ln)["status"] for ln in lines) == [200, 401, 429], lines
    err = p.stderr()
    # the diagnostics are all there, on stderr; one user with one key, said as such
    assert "configuration ok" in err and "has 1 user and 1 key" in err, err
    assert "reloaded" in err and '"warn"' in err, err


# ------------------------------------------------------------------ SIGUSR1

def test_sigusr1_reopens_the_access_log_file(proxies, catalog):
    # logrotate: rename the file, send SIGUSR1; new lines go to a new file at the
    # configured path, none is lost, and none lands in the renamed file once the new one
    # is there. Requests keep coming through the rotation.
    catalog.plan("roomy", "--rate", "1000000/min")
    _, key = catalog.user_key("roomy")
    p = proxies.start(catalog, store="memory")
    path = p.access_log
    sent = []
    errors = []
    stop = threading.Event()

    def traffic(tag):
        n = 0
        while not stop.is_set():
            target = "/%s-%d" % (tag, n)
            try:
                status = http_request(p.port, "GET", target, key=key, timeout=10).status
            except Exception as e:   # noqa: BLE001 - any failure fails the test below
                errors.append(repr(e))
                return
            if status != 200:
                errors.append("%s: %d" % (target, status))
            sent.append(target)
            n += 1

    threads = [threading.Thread(target=traffic, args=("during%d" % i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(0.5)
    os.rename(path, path + ".1")
    p.signal(signal.SIGUSR1)
    reopened = wait_until(lambda: os.path.exists(path), 5 * SLOW)
    time.sleep(0.3)
    stop.set()
    for t in threads:
        t.join(30)
    assert reopened, "no new access log at %s after SIGUSR1\n%s" % (path, p.stderr()[-2000:])
    assert p.proc.poll() is None, "tierproxy exited on SIGUSR1: %s" % p.proc.returncode
    assert not errors, errors[:5]
    # requests made after the reopen completed go to the new file only
    after = ["/after-%d" % i for i in range(20)]
    for target in after:
        assert p.get(target, key=key).status == 200

    def paths(f):
        text = open(f).read()
        assert text.endswith("\n") or text == "", "a torn line at the end of %s" % f
        return [e["path"] for e in json_lines(text)]   # every line whole JSON
    everything = sent + after
    assert wait_until(lambda: len(paths(path + ".1")) + len(paths(path)) >= len(everything),
                      5 * SLOW)
    old, new = paths(path + ".1"), paths(path)
    assert sorted(old + new) == sorted(everything), "lines lost or doubled"
    assert not [x for x in old if x.startswith("/after")], old[-5:]
    assert sorted(x for x in new if x.startswith("/after")) == sorted(after), new[-25:]
    assert old, "nothing was logged before the rotation"


def test_sigusr1_with_the_access_log_on_stdout_is_harmless(proxies, catalog):
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, store="memory", log={"access": "stdout"})
    p.signal(signal.SIGUSR1)
    time.sleep(0.3 * SLOW)
    assert p.proc.poll() is None, "tierproxy exited on SIGUSR1: %s" % p.proc.returncode
    assert p.get("/still", key=key).status == 200
    assert wait_until(lambda: any('"/still"' in ln for ln in stdout_lines(p)), 5 * SLOW), \
        stdout_lines(p)


# ------------------------------------------------------------------ rejection warnings

def test_rejection_warnings_once_per_user_and_limit_per_10s_with_a_count(proxies, catalog):
    # 76k rejections a second must not write 76k lines: one line per user and limit per
    # 10 s, saying how many rejections it stands for. Two workers share the budget.
    catalog.plan("one", "--rate", "1/min")
    user, key = catalog.user_key("one")
    other, other_key = catalog.user_key("one")
    p = proxies.start(catalog, store="memory", proxy={"workers": 2})
    assert p.get("/w", key=key).status == 200
    statuses = []

    def hammer(n):
        for _ in range(n):       # a connection each: the kernel spreads them over workers
            statuses.append(http_request(p.port, "GET", "/w", key=key).status)
    t0 = time.monotonic()
    threads = [threading.Thread(target=hammer, args=(50,)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert statuses == [429] * 200, statuses
    assert time.monotonic() - t0 < 9, "the 200 rejections took too long to test the window"
    # another user is another line, at once
    assert p.get("/w", key=other_key).status == 200
    assert p.get("/w", key=other_key).status == 429
    assert wait_until(lambda: warnings_for(p, other), 5 * SLOW), p.stderr()[-2000:]
    got = warnings_for(p, user)
    assert len(got) == 1, got
    assert got[0]["limit_type"] == "http" and got[0]["limit"] == 1, got
    assert got[0]["rejections"] == 1, got
    assert [w["rejections"] for w in warnings_for(p, other)] == [1]
    # 10 s after the first held back, a line carries the 199 on its own, with no later
    # rejection (test_rejection_log.py holds the burst's count and its time)
    assert wait_until(lambda: len(warnings_for(p, user)) == 2, 10 + 5 * SLOW), p.stderr()[-2000:]
    assert warnings_for(p, user)[1]["rejections"] == 199, warnings_for(p, user)
    # the next rejection comes within 10 s of that line: held again
    assert p.get("/w", key=key).status == 429
    assert len(warnings_for(p, user)) == 2, warnings_for(p, user)
    assert key not in p.stderr()


# ------------------------------------------------------------------ --check

def run(args, env=None):
    cp = subprocess.run([TIERPROXY_BIN] + list(args), capture_output=True, text=True,
                        timeout=60, env=_clean_env(env), stdin=subprocess.DEVNULL)
    return cp, cp.stdout + cp.stderr


def good_ini(proxies, catalog, tmp_path, name="good.ini", **sections):
    ini = proxies.config(catalog, store="memory", **sections)
    path = tmp_path / name
    write_ini(path, ini)
    return path, ini


def line_of(path, text):
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if ln.startswith(text):
            return i
    raise AssertionError("%r not in %s" % (text, path))


BAD_REDIS = "redis://host:notaport/0"


def test_check_refuses_a_bad_redis_url_from_a_flag_naming_the_flag(proxies, catalog, tmp_path):
    path, _ = good_ini(proxies, catalog, tmp_path)
    cp, out = run(["-c", str(path), "--redis", BAD_REDIS, "--check"])
    assert cp.returncode == 1, out
    assert "--redis" in out and "port" in out, out
    assert "configuration ok" not in out, out
    # the start refuses it with the same words
    cp2, out2 = run(["-c", str(path), "--redis", BAD_REDIS])
    assert cp2.returncode == 1 and "--redis" in out2, out2


def test_check_refuses_a_bad_redis_url_from_the_environment(proxies, catalog, tmp_path):
    path, _ = good_ini(proxies, catalog, tmp_path)
    cp, out = run(["-c", str(path), "--check"],
                  env={"TIERPROXY_LIMITS_STORE": "redis", "TIERPROXY_LIMITS_REDIS": BAD_REDIS})
    assert cp.returncode == 1, out
    assert "TIERPROXY_LIMITS_REDIS" in out, out


def test_check_refuses_a_bad_redis_url_in_the_file_naming_file_line_key(proxies, catalog,
                                                                        tmp_path):
    path, _ = good_ini(proxies, catalog, tmp_path, limits={"store": "redis", "redis": BAD_REDIS})
    cp, out = run(["-c", str(path), "--check"])
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "redis =")) in out and "redis" in out, out


def test_check_refuses_an_anonymous_plan_missing_from_the_catalog(proxies, catalog, tmp_path):
    path, _ = good_ini(proxies, catalog, tmp_path, auth={"anonymous_plan": "nosuchplan"})
    cp, out = run(["-c", str(path), "--check"])
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "anonymous_plan =")) in out, out
    assert "anonymous_plan" in out and "nosuchplan" in out, out


def test_check_refuses_a_listen_name_that_does_not_resolve(proxies, catalog, tmp_path):
    # a host name is resolved (SPEC "Day two": listen = localhost:8080 works); one that
    # does not resolve is refused, naming where it came from
    path, _ = good_ini(proxies, catalog, tmp_path,
                       proxy={"listen": "no-such-host.invalid:%d" % free_port()})
    cp, out = run(["-c", str(path), "--check"])
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "listen =")) in out and "listen" in out, out


def test_check_refuses_an_access_log_that_cannot_be_opened(proxies, catalog, tmp_path):
    bad = str(tmp_path / "no-such-dir" / "access.log")
    path, _ = good_ini(proxies, catalog, tmp_path, log={"access": bad})
    cp, out = run(["-c", str(path), "--check"])
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "access =")) in out and bad in out, out


def test_check_refuses_an_upstream_with_a_bad_port(proxies, catalog, tmp_path):
    path, _ = good_ini(proxies, catalog, tmp_path)
    cp, out = run(["-c", str(path), "--upstream", "http://127.0.0.1:notaport", "--check"])
    assert cp.returncode == 1, out
    assert "--upstream" in out, out


def test_check_ok_says_so_on_stderr_and_exits_0(proxies, catalog, tmp_path):
    catalog.user_key("free")
    path, _ = good_ini(proxies, catalog, tmp_path)
    cp, out = run(["-c", str(path), "--check"])
    assert cp.returncode == 0, out
    assert cp.stdout == "", cp.stdout
    assert "configuration ok" in cp.stderr and "has 1 user and 1 key" in cp.stderr, cp.stderr
