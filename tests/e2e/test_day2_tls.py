"""Redis over TLS and as an ACL user (SPEC "Additions of 2026-11-28", "Day two"):
`redis = rediss://[user:password@]host:port/db` connects over TLS, verified against the
system's CAs or `[limits] redis_ca_file`, and `user:password@` logs in as a Redis 6 ACL user,
in single and cluster mode, for checks, leases, `tierctl usage` and the catalog alike.

Each test makes its own CA and certificates with `openssl` and starts its own redis-server
with TLS alone (`--port 0 --tls-port P`) on a loopback port it picks, so every byte between
proxy and Redis goes through TLS: a proxy that spoke plain RESP there would meet no Redis."""
import json
import re
import shutil
import socket
import ssl
import subprocess
import time

import pytest

from cluster import ClusterNode, RedisCluster
from conftest import (SLOW, TIERPROXY_BIN, Catalog, _children, _clean_env, free_port, require_program, resp_encode,
                      resp_read, wait_until, write_ini)
from fleet_helpers import check_concurrency_429, fleet, http_read, http_send, wait_stat, ws_upstream  # noqa: F401
from test_exactness import PER_THREAD, THREADS, hammer
from test_fleet_catalog import Fleet

REDIS_SERVER = "/usr/bin/redis-server"
PASSWORD = "tls-horse-battery-7"
WRONG_PASSWORD = "wrong-staple-9"


# --------------------------------------------------------------------------------------
# certificates and a TLS redis-server


class Pki:
    """A CA and a certificate for 127.0.0.1 and localhost signed by it; another CA that
    signed nothing of ours; and a certificate of our CA for a name that is not this host."""

    def __init__(self, d):
        self.dir = d
        d.mkdir(parents=True, exist_ok=True)
        self.openssl = require_program("openssl", "openssl")
        self.ca, self.ca_key = self._ca("ca", "tierproxy test CA")
        self.other_ca, _ = self._ca("other-ca", "a CA that signed nothing here")
        self.cert, self.key = self._leaf("redis", "IP:127.0.0.1,DNS:localhost")
        self.elsewhere_cert, self.elsewhere_key = self._leaf("elsewhere", "DNS:elsewhere.test")

    def _run(self, *args):
        cp = subprocess.run([self.openssl] + list(args), capture_output=True, text=True, cwd=str(self.dir),
                            timeout=60, stdin=subprocess.DEVNULL)
        assert cp.returncode == 0, "openssl %s: %s" % (" ".join(args), cp.stderr)

    def _ca(self, name, cn):
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", name + ".key", "-out", name + ".pem", "-days", "30", "-subj", "/CN=" + cn)
        return self.dir / (name + ".pem"), self.dir / (name + ".key")

    def _leaf(self, name, san):
        (self.dir / (name + ".ext")).write_text("subjectAltName=%s\n" % san)
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", name + ".key", "-out", name + ".csr", "-subj", "/CN=" + name)
        self._run("x509", "-req", "-in", name + ".csr", "-CA", self.ca.name, "-CAkey", self.ca_key.name,
                  "-CAcreateserial", "-out", name + ".pem", "-days", "30", "-extfile", name + ".ext")
        return self.dir / (name + ".pem"), self.dir / (name + ".key")

    def server_args(self, cert=None, key=None):
        """redis-server's TLS options; clients need no certificate of their own."""
        return ["--tls-cert-file", str(cert or self.cert), "--tls-key-file", str(key or self.key),
                "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no"]

    def redis_cmd(self, port, *args, timeout=5, login=(), check_name=True):
        """One command to a TLS redis-server on 127.0.0.1:port (verified with our CA; for
        127.0.0.1 unless not check_name), after AUTH login when given."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.check_hostname = check_name
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall((resp_encode("AUTH", *login) if login else b"") + resp_encode(*args))
                f = s.makefile("rb")
                if login:
                    resp_read(f)
                return resp_read(f)


@pytest.fixture
def pki(tmp_path):
    return Pki(tmp_path / "pki")


class TlsRedis:
    """A redis-server that speaks TLS alone (--port 0), with the interface of conftest's
    RedisServer that the fixtures use (url, port, cmd, stop, close)."""

    def __init__(self, tmpdir, pki, cert=None, key=None, userinfo=""):
        self.tmpdir, self.pki = tmpdir, pki
        self.port = free_port()
        self.userinfo = userinfo
        self.check_name = cert is None   # another certificate may name another host
        self.cert, self.key = cert, key
        tmpdir.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self):
        log = open(self.tmpdir / ("redis-tls-%d.log" % self.port), "ab")
        self.proc = subprocess.Popen(
            [require_program(REDIS_SERVER, "redis-server"), "--port", "0", "--tls-port", str(self.port),
             "--bind", "127.0.0.1"] + self.pki.server_args(self.cert, self.key) +
            ["--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", str(self.tmpdir),
             "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        _children.append(self.proc)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server (TLS) exited with %s" % self.proc.returncode)
            try:
                return self.cmd("PING", timeout=1) == "PONG"
            except (OSError, RuntimeError):
                return False
        if not wait_until(ready, 10):
            raise RuntimeError("redis-server (TLS) did not answer PING on port %d" % self.port)

    @property
    def url(self):
        return "rediss://%s127.0.0.1:%d/0" % (self.userinfo, self.port)

    def url_as(self, userinfo, host="127.0.0.1"):
        return "rediss://%s%s:%d/0" % (userinfo, host, self.port)

    def cmd(self, *args, timeout=5):
        # with ACL users (acl_setup) the default user is off: the test's own commands log in
        login = ("admin", "admin-pw") if self.userinfo else ()
        return self.pki.redis_cmd(self.port, *args, timeout=timeout, login=login, check_name=self.check_name)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    close = stop


@pytest.fixture
def tls_redis_factory(tmp_path, pki):
    made = []

    def make(**kw):
        r = TlsRedis(tmp_path / ("redis-tls%d" % len(made)), pki, **kw)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


@pytest.fixture
def tls_redis(tls_redis_factory):
    return tls_redis_factory()


def tls_limits(pki, ca=None, **more):
    """[limits] for a proxy on a TLS Redis: our CA file (or the one given; "" for the system's)."""
    d = {"redis_ca_file": str(pki.ca if ca is None else ca) if ca != "" else None}
    d.update(more)
    return d


def check_ini(proxies, catalog, tmp_path, name, redis_url, **limits):
    ini = proxies.config(catalog, store="redis", redis=type("R", (), {"url": redis_url})())
    for k, v in limits.items():
        if v is None:
            ini["limits"].pop(k, None)
        else:
            ini["limits"][k] = v
    path = tmp_path / name
    write_ini(path, ini)
    return path


def run_check(path):
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(path), "--check"], capture_output=True, text=True,
                        env=_clean_env(), timeout=60 * SLOW, stdin=subprocess.DEVNULL)
    return cp, cp.stdout + cp.stderr


def usage(catalog, user, ini_path, check=True):
    cp = catalog.run("usage", user, "--json", "--config", str(ini_path), check=check)
    return cp if not check else json.loads(cp.stdout)


def rate_used(doc):
    rates = [lim for lim in doc["limits"] if lim["kind"] == "rate"]
    assert len(rates) == 1, doc
    return rates[0]["used"]


# --------------------------------------------------------------------------------------
# single mode


def test_rate_limit_is_exact_over_tls_across_two_proxies(catalog, proxies, tls_redis, pki, upstream):
    """5/min shared by two proxies over TLS: 5 pass (decided by Redis, not locally), the 6th
    gets 429 on either proxy, and the counts are in the TLS Redis."""
    catalog.plan("tls5", "--rate", "5/min")
    user, key = catalog.user_key("tls5")
    a, b = fleet(proxies, catalog, tls_redis, upstream, limits=tls_limits(pki))
    statuses = [(a if i % 2 else b).get("/t/%d" % i, key=key).status for i in range(5)]
    assert statuses == [200] * 5, statuses
    for p in (a, b):
        r = p.get("/t/over", key=key)
        assert r.status == 429 and r.json()["error_code"] == "rate_limit_exceeded", r
    decisions = {ln["decision"] for p in (a, b) for ln in p.access_log_lines() if ln.get("path", "").startswith("/t/")}
    assert "local" not in decisions, "requests were decided without Redis: %r" % decisions
    keys = tls_redis.cmd("KEYS", "*{u:%s}*" % user)
    assert keys, "no count of %s in the TLS Redis" % user
    for p in (a, b):
        h = json.loads(p.admin("/health").body)
        assert h["store"] == "ok", h


def test_exact_under_parallel_load_over_tls(catalog, proxies, tls_redis, pki, upstream):
    """8 clients at once on two proxies, 50/min: exactly 50 admitted, every check pipelined
    over the workers' TLS connections."""
    catalog.plan("tlsload", "--rate", "50/min")
    _, key = catalog.user_key("tlsload")
    ps = fleet(proxies, catalog, tls_redis, upstream, limits=tls_limits(pki))
    statuses, _ = hammer(ps, key)
    assert len(statuses) == THREADS * PER_THREAD and set(statuses) <= {200, 429}, sorted(set(statuses))
    assert statuses.count(200) == 50, statuses.count(200)
    assert "local" not in {ln["decision"] for p in ps for ln in p.access_log_lines()}


def test_concurrency_leases_over_tls(catalog, proxies, tls_redis, pki, ws_upstream):
    """--concurrency 1 fleet-wide over TLS: a request held on one proxy makes the other
    answer 429; the slot is back once it ends."""
    catalog.plan("tlsconc", "--rate", "100000/min", "--concurrency", "1")
    user, key = catalog.user_key("tlsconc")
    a, b = fleet(proxies, catalog, tls_redis, ws_upstream, limits=tls_limits(pki))
    assert a.get("/slow/0", key=key).status == 200     # both connected: the first check is Redis'
    assert b.get("/slow/0", key=key).status == 200
    s = socket.create_connection(("127.0.0.1", a.port), timeout=30)
    try:
        http_send(s, "GET", "/slow/2000", key=key)
        assert wait_stat(ws_upstream, "open", user, 1) == 1, "the slow request never arrived"
        leases = [k for k in tls_redis.cmd("KEYS", "*{u:%s}*" % user) if tls_redis.cmd("TYPE", k) == "zset"]
        assert leases and sum(tls_redis.cmd("ZCARD", k) for k in leases) == 1, leases
        check_concurrency_429(b.get("/slow/0", key=key))
        assert http_read(s).status == 200
    finally:
        s.close()
    assert wait_until(lambda: b.get("/slow/0", key=key).status == 200, 5 * SLOW), "the slot never came back"
    assert ws_upstream.stats()["max_open"][user] == 1


def test_tls_redis_away_and_back(catalog, proxies, tls_redis, pki, upstream):
    """Redis over TLS goes away and comes back empty: meanwhile on_store_error (local)
    decides; then the proxy connects again (a new TLS handshake) and Redis decides again."""
    catalog.plan("tlsback", "--rate", "1000/min")
    _, key = catalog.user_key("tlsback")
    p = proxies.start(catalog, store="redis", redis=tls_redis, key_prefix="tlsback:", limits=tls_limits(pki))
    assert p.get("/before", key=key).status == 200
    tls_redis.stop()
    assert p.get("/away", key=key).status == 200
    tls_redis.start()

    def decided_by_redis():
        assert p.get("/back", key=key).status == 200
        back = [ln for ln in p.access_log_lines() if ln.get("path") == "/back"]
        return back and back[-1]["decision"] != "local"
    assert wait_until(decided_by_redis, 5 * SLOW, interval=0.1), p.stderr()[-2000:]
    by_path = {ln["path"]: ln["decision"] for ln in p.access_log_lines()}
    assert by_path["/before"] != "local" and by_path["/away"] == "local", by_path
    # written once every worker is back (store_log.c), which can be after /back was decided
    assert wait_until(lambda: re.search(r"store back", p.stderr()), 5 * SLOW), p.stderr()[-2000:]


def test_tierctl_usage_reads_the_counts_over_tls(catalog, proxies, tls_redis, pki, upstream, tmp_path):
    """`tierctl usage --config FILE` reads rediss:// and redis_ca_file from the proxy's file."""
    catalog.plan("tlsuse", "--rate", "10/min")
    user, key = catalog.user_key("tlsuse")
    p = proxies.start(catalog, store="redis", redis=tls_redis, key_prefix="tlsuse:", limits=tls_limits(pki))
    for i in range(3):
        assert p.get("/u/%d" % i, key=key).status == 200
    assert rate_used(usage(catalog, user, p.ini_path)) == 3


def test_catalog_published_and_followed_over_tls(catalog, proxies, tls_redis, pki, tmp_path):
    """tierctl publish over TLS; a proxy following the fleet's catalog over TLS serves it and
    sees a revocation published later; status lists it, pull brings the catalog to another
    file."""
    fl = Fleet(proxies, catalog, tls_redis, tmp_path)
    ini = fl.ini_path.read_text().replace("[limits]\n", "[limits]\nredis_ca_file = %s\n" % pki.ca)
    fl.ini_path.write_text(ini)
    user, key = catalog.user_key("free")
    v = fl.publish(catalog)
    assert v >= 1
    db = tmp_path / "tls-follower.db"
    p = proxies.start(catalog, store="redis", redis=tls_redis, key_prefix=fl.prefix,
                      plans={"db": str(db), "follow": "redis", "refresh_ms": 200}, limits=tls_limits(pki))
    assert wait_until(lambda: p.get("/f", key=key).status == 200, 5 * SLOW), p.stderr()[-2000:]
    assert wait_until(lambda: len(fl.status(catalog)["followers"]) == 1, 5 * SLOW), fl.status(catalog)
    other = Catalog(tmp_path / "pulled.db").init()
    cp = other.run("--config", str(fl.ini_path), "pull", check=False)
    assert cp.returncode == 0, cp.stderr
    assert other.key_ids(user), "pull did not bring %s's key" % user
    key_id = catalog.key_ids(user)[0]
    cp = fl.change(catalog, "key", "revoke", str(key_id))
    assert cp.returncode == 0 and re.search(r"publish", cp.stderr, re.I), cp.stderr
    assert wait_until(lambda: p.get("/f", key=key).status == 401, 5 * SLOW), "the revocation never arrived"
    h = json.loads(p.admin("/health").body)
    assert h.get("catalog_version", 0) > v, h


# --------------------------------------------------------------------------------------
# a certificate the proxy must refuse


def test_check_over_tls_passes_and_refuses_an_untrusted_certificate(catalog, proxies, pki, tls_redis_factory,
                                                                    tmp_path):
    """--check logs in over TLS: with our CA it answers (exit 0); with a CA that did not sign
    the server's certificate, with the system's CAs, and with a certificate for another name
    it exits 1 with one line naming the server and why, and no password."""
    good = tls_redis_factory()
    path = check_ini(proxies, catalog, tmp_path, "ok.ini", good.url_as(":%s@" % PASSWORD), **tls_limits(pki))
    good.cmd("CONFIG", "SET", "requirepass", PASSWORD)
    cp, out = run_check(path)
    assert cp.returncode == 0, out
    assert "127.0.0.1:%d answers" % good.port in out, out

    where = "127.0.0.1:%d" % good.port
    for name, limits in (("other-ca.ini", tls_limits(pki, ca=pki.other_ca)),
                         ("system-cas.ini", tls_limits(pki, ca=""))):
        path = check_ini(proxies, catalog, tmp_path, name, good.url_as(":%s@" % PASSWORD), **limits)
        cp, out = run_check(path)
        assert cp.returncode == 1, "%s: %s" % (name, out)
        said = [ln for ln in out.splitlines() if where in ln]
        assert len(said) == 1 and re.search(r"certificate", said[0], re.I), "%s: %s" % (name, out)
        assert "verify failed" in said[0] or "not trusted" in said[0], said
        assert PASSWORD not in out, out

    elsewhere = tls_redis_factory(cert=pki.elsewhere_cert, key=pki.elsewhere_key)
    path = check_ini(proxies, catalog, tmp_path, "name.ini", elsewhere.url, **tls_limits(pki))
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    said = [ln for ln in out.splitlines() if "127.0.0.1:%d" % elsewhere.port in ln]
    assert len(said) == 1 and re.search(r"mismatch", said[0], re.I), out
    # the name in the URL is what is verified: localhost is in the good certificate
    path = check_ini(proxies, catalog, tmp_path, "localhost.ini", good.url_as(":%s@" % PASSWORD, "localhost"),
                     **tls_limits(pki))
    cp, out = run_check(path)
    assert cp.returncode == 0, out


def test_untrusted_certificate_at_run_time_is_one_clear_line(catalog, proxies, pki, tls_redis, upstream, tmp_path):
    """A proxy whose redis_ca_file did not sign Redis' certificate starts, decides requests by
    on_store_error (local) and says why in one stderr line naming the server; /health names
    it; tierctl usage and publish refuse with one line naming it."""
    catalog.plan("tlsbad", "--rate", "3/min")
    user, key = catalog.user_key("tlsbad")
    p = proxies.start(catalog, store="redis", redis=tls_redis, key_prefix="tlsbad:",
                      limits=tls_limits(pki, ca=pki.other_ca))
    statuses = [p.get("/b", key=key).status for _ in range(4)]
    assert statuses == [200] * 3 + [429], statuses
    assert {ln["decision"] for ln in p.access_log_lines()} == {"local"}
    where = "127.0.0.1:%d" % tls_redis.port

    def named():
        return [ln for ln in p.stderr().splitlines() if where in ln and re.search(r"certificate", ln, re.I)]
    assert wait_until(named, 5 * SLOW), p.stderr()[-3000:]
    time.sleep(1.5)            # reconnects go on (every 250 ms per worker): the line stays one
    assert len(named()) == 1, named()
    h = json.loads(p.admin("/health").body)
    assert "certificate" in json.dumps(h), h

    cp = usage(catalog, user, p.ini_path, check=False)
    assert cp.returncode == 1, cp.stderr
    assert where in cp.stderr and re.search(r"certificate", cp.stderr, re.I), cp.stderr

    fl = Fleet(proxies, catalog, tls_redis, tmp_path)
    fl.ini_path.write_text(fl.ini_path.read_text().replace(
        "[limits]\n", "[limits]\nredis_ca_file = %s\n" % pki.other_ca))
    cp = fl.ctl(catalog, "publish")
    assert cp.returncode == 1, cp.stderr
    assert where in cp.stderr and re.search(r"certificate", cp.stderr, re.I), cp.stderr


# --------------------------------------------------------------------------------------
# ACL users


def admin_cmd(r, *args):
    """One command to r as acl_setup's admin (the default user is off)."""
    with socket.create_connection(("127.0.0.1", r.port), timeout=5) as s:
        s.sendall(resp_encode("AUTH", "admin", "admin-pw") + resp_encode(*args))
        f = s.makefile("rb")
        resp_read(f)
        return resp_read(f)


def acl_setup(r, prefix):
    """An admin to run the test's own commands, a proxy user limited to its key prefix (no
    @dangerous commands), and the default user off: only a right ACL login gets in."""
    assert r.cmd("ACL", "SETUSER", "admin", "on", ">admin-pw", "~*", "&*", "+@all") == "OK"
    assert r.cmd("ACL", "SETUSER", "tierproxy", "on", ">" + PASSWORD, "~%s*" % prefix, "+@all",
                 "-@dangerous") == "OK"
    assert r.cmd("ACL", "SETUSER", "default", "off") == "OK"


def test_acl_user_over_tls(catalog, proxies, pki, tls_redis_factory, upstream, tmp_path):
    """rediss://tierproxy:PASSWORD@...: the ACL user's checks are exact across two proxies,
    --check and usage log in as it; a wrong password is said (WRONGPASS) by --check, the
    running proxy and usage, never with the password."""
    r = tls_redis_factory()
    prefix = "acl%d:" % r.port
    acl_setup(r, prefix)
    r.userinfo = "tierproxy:%s@" % PASSWORD
    catalog.plan("acl5", "--rate", "5/min")
    user, key = catalog.user_key("acl5")
    a = proxies.start(catalog, store="redis", redis=r, key_prefix=prefix, limits=tls_limits(pki))
    b = proxies.start(catalog, store="redis", redis=r, key_prefix=prefix, limits=tls_limits(pki))
    statuses = [(a if i % 2 else b).get("/a/%d" % i, key=key).status for i in range(6)]
    assert statuses == [200] * 5 + [429], statuses
    assert "local" not in {ln["decision"] for p in (a, b) for ln in p.access_log_lines()}
    assert rate_used(usage(catalog, user, a.ini_path)) == 5
    cp, out = run_check(a.ini_path)
    assert cp.returncode == 0 and "answers" in out, out

    wrong = r.url_as("tierproxy:%s@" % WRONG_PASSWORD)
    path = check_ini(proxies, catalog, tmp_path, "wrong.ini", wrong, **tls_limits(pki))
    cp, out = run_check(path)
    assert cp.returncode == 1 and re.search(r"WRONGPASS", out), out
    assert WRONG_PASSWORD not in out, out
    cp = usage(catalog, user, path, check=False)
    assert cp.returncode == 1 and "WRONGPASS" in cp.stderr, cp.stderr
    assert WRONG_PASSWORD not in cp.stderr + cp.stdout
    p = proxies.start(catalog, store="redis", redis=type("R", (), {"url": wrong})(), key_prefix=prefix,
                      limits=tls_limits(pki))
    assert p.get("/w", key=key).status in (200, 429)
    assert wait_until(lambda: "WRONGPASS" in p.stderr(), 5 * SLOW), p.stderr()[-2000:]
    assert WRONG_PASSWORD not in p.stderr() and WRONG_PASSWORD not in p.admin("/health").body.decode()


def test_a_wrong_password_is_all_redis_hears(catalog, proxies, redis_factory, tmp_path):
    """Nothing goes to Redis before its AUTH is answered. Redis drops an unauthenticated
    client that sends a command over 16 KiB (the check script's SCRIPT LOAD), and the
    client's next write then meets a reset: over TLS, usage said "Broken pipe" instead of
    WRONGPASS. Redis logs each such drop ("Protocol error") at verbose."""
    r = redis_factory()
    assert r.cmd("CONFIG", "SET", "loglevel", "verbose") == "OK"
    prefix = "aclw%d:" % r.port
    acl_setup(r, prefix)
    wrong = "redis://tierproxy:%s@127.0.0.1:%d/0" % (WRONG_PASSWORD, r.port)
    path = check_ini(proxies, catalog, tmp_path, "wrong.ini", wrong)
    user, _ = catalog.user_key("free")
    cp = usage(catalog, user, path, check=False)
    assert cp.returncode == 1 and "WRONGPASS" in cp.stderr, cp.stderr
    p = proxies.start(catalog, store="redis", redis=type("R", (), {"url": wrong})(), key_prefix=prefix)
    assert wait_until(lambda: "WRONGPASS" in p.stderr(), 5 * SLOW), p.stderr()[-2000:]
    log = (r.tmpdir / ("redis-%d.log" % r.port)).read_text(errors="replace")
    assert "Protocol error" not in log, log[-3000:]


def test_usage_with_a_wrong_password_logs_in_once(catalog, redis_factory, proxies, tmp_path):
    """A wrong password is the store's own answer, which no retry changes: `tierctl usage`
    says WRONGPASS after its one login instead of logging in again and again until its wait
    for Redis runs out (it tried about a dozen times over 3 s)."""
    r = redis_factory()
    prefix = "aclo%d:" % r.port
    acl_setup(r, prefix)

    assert admin_cmd(r, "ACL", "LOG", "RESET") == "OK"
    wrong = "redis://tierproxy:%s@127.0.0.1:%d/0" % (WRONG_PASSWORD, r.port)
    path = check_ini(proxies, catalog, tmp_path, "once.ini", wrong)
    user, _ = catalog.user_key("free")
    cp = usage(catalog, user, path, check=False)
    assert cp.returncode == 1 and "WRONGPASS" in cp.stderr, cp.stderr
    failed = []
    for entry in admin_cmd(r, "ACL", "LOG"):
        fields = dict(zip(entry[0::2], entry[1::2]))
        if fields[b"reason"] == b"auth":
            failed.append(fields[b"count"])
    assert sum(failed) == 1, failed


def test_acl_user_over_plain_redis(catalog, proxies, redis_factory, upstream, tmp_path):
    """The same ACL login over redis:// (no TLS): checks, usage and publish."""
    r = redis_factory()
    prefix = "aclp%d:" % r.port
    acl_setup(r, prefix)
    admin = type("A", (), {})()
    url = "redis://tierproxy:%s@127.0.0.1:%d/0" % (PASSWORD, r.port)

    admin.url, admin.cmd = url, lambda *args: admin_cmd(r, *args)
    catalog.plan("aclp", "--rate", "4/min")
    user, key = catalog.user_key("aclp")
    a = proxies.start(catalog, store="redis", redis=admin, key_prefix=prefix)
    assert [a.get("/p", key=key).status for _ in range(5)] == [200] * 4 + [429]
    assert "local" not in {ln["decision"] for ln in a.access_log_lines()}
    assert rate_used(usage(catalog, user, a.ini_path)) == 4
    fl = Fleet(proxies, catalog, admin, tmp_path)
    fl.prefix, fl.catalog_key = prefix, prefix + "{catalog}"
    fl.ini_path.write_text(re.sub(r"key_prefix = .*", "key_prefix = " + prefix, fl.ini_path.read_text()))
    assert fl.publish(catalog) >= 1


# --------------------------------------------------------------------------------------
# Redis Cluster over TLS


class TlsClusterNode(ClusterNode):
    pki = None

    @property
    def url(self):
        return "rediss://127.0.0.1:%d/0" % self.port

    def start(self, redis_server, children):
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "redis.log", "ab")
        # tls-cluster: the bus and CLUSTER SLOTS' ports are TLS too, so the nodes the map
        # names are reached over TLS or not at all
        self.proc = subprocess.Popen(
            [redis_server, "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
             "--tls-cluster", "yes", "--tls-replication", "yes"] + self.pki.server_args() +
            ["--cluster-enabled", "yes", "--cluster-config-file", str(self.dir / "nodes.conf"),
             "--cluster-port", str(self.bus_port), "--cluster-node-timeout", "2000",
             "--cluster-require-full-coverage", "no",
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", str(self.dir), "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        children.append(self.proc)


def tls_cluster(tmp_path, pki):
    node_class = type("Node", (TlsClusterNode,), {"pki": pki})
    cls = type("TlsRedisCluster", (RedisCluster,), {
        "node_class": node_class,
        "cli_options": lambda self: ["--tls", "--cacert", str(pki.ca)]})
    return cls(tmp_path / "tls-cluster", free_port, pki.redis_cmd, wait_until,
               require_program(REDIS_SERVER, "redis-server"), _children)


def test_cluster_over_tls(catalog, proxies, pki, upstream, tmp_path):
    """redis_mode = cluster with rediss:// seeds: --check reads the cluster's state over TLS;
    two proxies keep 5/min exact for a user on each master (the masters the map names are
    reached over TLS); usage reads them."""
    require_program(shutil.which("redis-cli") or "redis-cli", "redis-tools")
    c = tls_cluster(tmp_path, pki)
    try:
        prefix = "ctls:"
        catalog.plan("ctls", "--rate", "5/min")
        spread = c.names_on_each_master(lambda i: "u:ct%d" % i)
        users = []
        for port, names in sorted(spread.items()):
            user_id = names[0][len("u:"):]
            catalog.user("ctls", user_id)
            users.append((port, user_id, catalog.key(user_id)))
        limits = tls_limits(pki, redis_mode="cluster")
        path = check_ini(proxies, catalog, tmp_path, "cluster.ini", c.seed_list, **limits)
        cp, out = run_check(path)
        assert cp.returncode == 0 and "cluster_state ok: 3 masters serve all 16384 slots" in out, out
        ps = [proxies.start(catalog, store="redis", redis=c, key_prefix=prefix, limits=limits) for _ in range(2)]
        for port, user_id, key in users:
            statuses = [ps[i % 2].get("/c/%d" % i, key=key).status for i in range(6)]
            assert statuses == [200] * 5 + [429], "user %s on master :%d: %r" % (user_id, port, statuses)
            assert c.keys_on(c.node_on(port), "%s{u:%s}:*" % (prefix, user_id)), \
                "no key of %s on its master :%d" % (user_id, port)
        assert "local" not in {ln["decision"] for p in ps for ln in p.access_log_lines()}
        assert rate_used(usage(catalog, users[0][1], ps[0].ini_path)) == 5
    finally:
        c.close()
