"""The systemd integration, as far as it can be tested without systemd as PID 1.

sd_notify(3): the proxy is started with NOTIFY_SOCKET pointing to an AF_UNIX datagram
socket the test binds (a path, or an abstract '@' address) and plays the service manager:
  READY=1      once the proxy answers requests on its port (Type=notify)
  RELOADING=1, then READY=1    on SIGHUP, whether the new file is taken or refused; after
               that READY=1 the new configuration is the one in use
  STOPPING=1   on SIGTERM/SIGINT, as the drain begins (not after it)
Every message comes from the proxy's main PID (NotifyAccess=main, the default, drops the
others). Without NOTIFY_SOCKET, or with one nobody listens on, the proxy starts as usual.

etc/tierproxy.service: the settings the README and the proxy rely on, and
`systemd-analyze verify` without a word (on a copy whose ExecStart is the built binary; the
unit as installed, its man pages included, is test_day2_install.py's).
"""
import os
import pathlib
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time

import pytest

import conftest
from conftest import SLOW, port_open, write_ini

UNIT = pathlib.Path(__file__).resolve().parents[2] / "etc" / "tierproxy.service"


# --------------------------------------------------------------------------------------
# a service manager's notification socket

class Notification:
    def __init__(self, data, pid, t):
        self.raw = data
        self.pid = pid              # the sender's PID (SCM_CREDENTIALS), None if absent
        self.t = t                  # time.monotonic() when received
        self.fields = {}
        for line in data.decode("utf-8", "replace").split("\n"):
            if "=" in line:
                k, _, v = line.partition("=")
                self.fields[k] = v

    def has(self, key, value=None):
        return key in self.fields and (value is None or self.fields[key] == value)

    def __repr__(self):
        return "<notify pid=%s %r>" % (self.pid, self.raw)


class NotifySocket:
    """An AF_UNIX datagram socket like systemd's: NOTIFY_SOCKET=<address>."""

    def __init__(self, address):
        self.address = address
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind("\0" + address[1:] if address.startswith("@") else address)
        # the kernel attaches the sender's credentials, as systemd asks it to
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.received = []

    def recv(self, timeout):
        """The next notification, or None after timeout seconds."""
        self.sock.settimeout(max(timeout, 0.001))
        try:
            data, anc, _, _ = self.sock.recvmsg(65536, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, kind, cdata in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iII", cdata[:12])[0]
        n = Notification(data, pid, time.monotonic())
        self.received.append(n)
        return n

    def until(self, key, value, timeout, proc=None):
        """Notifications up to and including the first with key=value. Fails when it does
        not come within timeout seconds (or the process exits first)."""
        got = []
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            n = self.recv(min(left, 0.5))
            if n is not None:
                got.append(n)
                if n.has(key, value):
                    return got
                continue
            if proc is not None and proc.poll() is not None:
                n = self.recv(0.2)          # sent just before exiting
                if n is not None:
                    got.append(n)
                    if n.has(key, value):
                        return got
                    continue
                pytest.fail("no %s=%s: the proxy exited with %s; got %r"
                            % (key, value, proc.returncode, got), pytrace=False)
            if left <= 0:
                pytest.fail("no %s=%s within %.0fs; got %r" % (key, value, timeout, got),
                            pytrace=False)

    def close(self):
        self.sock.close()


def states(notifications):
    """The state changes (READY/RELOADING/STOPPING) in order, as "KEY=VALUE" strings."""
    out = []
    for n in notifications:
        for k in ("READY", "RELOADING", "STOPPING"):
            if k in n.fields:
                out.append("%s=%s" % (k, n.fields[k]))
    return out


@pytest.fixture
def notify_dir():
    # not tmp_path: a socket path must fit in sun_path (108 bytes)
    d = tempfile.mkdtemp(prefix="tpn-", dir="/tmp")
    yield pathlib.Path(d)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def notify(notify_dir):
    s = NotifySocket(str(notify_dir / "notify"))
    yield s
    s.close()


def start_notified(proxies, catalog, notify, **kw):
    """A proxy with NOTIFY_SOCKET=notify's address; returns it once READY=1 came, and the
    notifications up to then."""
    kw.setdefault("store", "memory")
    p = proxies.start(catalog, env={"NOTIFY_SOCKET": notify.address}, wait=False, **kw)
    got = notify.until("READY", "1", 20 * SLOW, proc=p.proc)
    return p, got


def assert_from_main_pid(p, notifications):
    for n in notifications:
        assert n.pid == p.proc.pid, \
            "%r not sent by the main process %d (NotifyAccess=main drops it)" % (n, p.proc.pid)


# --------------------------------------------------------------------------------------
# sd_notify

def test_ready_only_once_it_answers(catalog, start_proxy, notify):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, env={"NOTIFY_SOCKET": notify.address}, wait=False)
    got = notify.until("READY", "1", 20 * SLOW, proc=p.proc)
    # right now, without waiting for anything: the port takes connections and answers
    listening = port_open(p.port)
    r = p.get("/after-ready", key=key, timeout=10 * SLOW)
    assert listening, "READY=1 sent before the proxy listens on %d" % p.port
    assert r.status == 200 and r.echo["path"] == "/after-ready", r
    assert states(got) == ["READY=1"], "before READY=1: %r" % got
    assert_from_main_pid(p, got)
    # READY=1 once only
    extra = notify.recv(0.5 * SLOW)
    assert extra is None, "another notification without a signal: %r" % extra


def test_ready_on_an_abstract_socket(catalog, proxies):
    address = "@tierproxy-e2e-%d-%d" % (os.getpid(), time.monotonic_ns() % 10**9)
    s = NotifySocket(address)
    try:
        _, key = catalog.user_key("free")
        p, got = start_notified(proxies, catalog, s)
        assert states(got) == ["READY=1"], got
        assert_from_main_pid(p, got)
        assert p.get("/x", key=key, timeout=10 * SLOW).status == 200
    finally:
        s.close()


def test_sighup_reloading_then_ready_with_the_new_file(catalog, proxies, notify):
    catalog.plan("five", "--rate", "5/min")
    _, key = catalog.user_key("five")
    p, _ = start_notified(proxies, catalog, notify, limits={"headers": "draft"})
    assert p.get("/x", key=key).header("RateLimit-Limit") == "5"
    p.ini["limits"]["headers"] = "x"
    write_ini(p.ini_path, p.ini)
    before_us = time.monotonic() * 1e6
    p.signal(signal.SIGHUP)
    got = notify.until("READY", "1", 10 * SLOW, proc=p.proc)
    assert states(got) == ["RELOADING=1", "READY=1"], got
    assert_from_main_pid(p, got)
    # Type=notify-reload (systemd 253+) takes RELOADING=1 only with MONOTONIC_USEC, the
    # CLOCK_MONOTONIC time of the reload
    reloading = [n for n in got if "RELOADING" in n.fields][0]
    stamp = int(reloading.fields.get("MONOTONIC_USEC", "0"))
    assert before_us <= stamp <= time.monotonic() * 1e6, reloading.fields
    # READY=1 ends the reload: the new file is in use from now on, no waiting
    r = p.get("/x", key=key)
    assert r.header("X-RateLimit-Limit") == "5" and r.header("RateLimit-Limit") is None, \
        "READY=1 came before the reloaded configuration was in use: %r" % r
    assert p.proc.poll() is None


def test_sighup_with_a_bad_file_still_ends_with_ready(catalog, proxies, notify):
    catalog.plan("fifty", "--rate", "50/min")
    _, key = catalog.user_key("fifty")
    p, _ = start_notified(proxies, catalog, notify, limits={"headers": "draft"})
    p.ini_path.write_text("[limits]\nheaders = sideways\n")
    p.signal(signal.SIGHUP)
    got = notify.until("READY", "1", 10 * SLOW, proc=p.proc)
    assert states(got) == ["RELOADING=1", "READY=1"], got
    assert p.proc.poll() is None, "the proxy exited on a bad file"
    r = p.get("/x", key=key)
    assert r.status == 200 and r.header("RateLimit-Limit") == "50", r


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stopping_as_the_drain_begins(catalog, proxies, notify, sig):
    _, key = catalog.user_key("free")
    p, _ = start_notified(proxies, catalog, notify)
    slow_ms = int(min(3000 * SLOW, 8000))      # within the 10 s drain
    result = {}

    def slow():
        try:
            result["r"] = p.get("/slow/%d" % slow_ms, key=key, timeout=60 * SLOW)
        except Exception as e:      # noqa: BLE001 (reported by the assertion below)
            result["error"] = repr(e)
        result["t"] = time.monotonic()
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(min(0.5 * SLOW, 2.0))           # the request is in flight
    p.signal(sig)
    got = notify.until("STOPPING", "1", 10 * SLOW, proc=p.proc)
    t_stopping = got[-1].t
    assert states(got) == ["STOPPING=1"], got
    assert_from_main_pid(p, got)
    t.join(60 * SLOW)
    assert "r" in result and result["r"].status == 200, result
    assert t_stopping < result["t"], "STOPPING=1 came only after the in-flight request ended"
    p.proc.wait(15 * SLOW)
    assert p.proc.returncode == 0, p.stderr()[-2000:]
    late = notify.recv(0.2)
    assert late is None, "after STOPPING=1: %r" % late


def test_starts_without_notify_socket(catalog, proxies, monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, store="memory")
    assert p.get("/x", key=key).status == 200
    p.signal(signal.SIGHUP)
    time.sleep(0.3)
    assert p.get("/x", key=key).status == 200
    assert p.proc.poll() is None


@pytest.mark.parametrize("where", ["missing", "not-a-socket"])
def test_starts_with_a_notify_socket_nobody_listens_on(catalog, proxies, notify_dir, where):
    path = notify_dir / "notify"
    if where == "not-a-socket":
        path.write_text("")
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, store="memory", env={"NOTIFY_SOCKET": str(path)})
    assert p.get("/x", key=key).status == 200
    p.signal(signal.SIGHUP)
    time.sleep(0.3)
    assert p.get("/x", key=key).status == 200
    assert p.proc.poll() is None


# --------------------------------------------------------------------------------------
# etc/tierproxy.service

def read_unit(path):
    """{section: [(key, value), ...]} (repeated keys kept in order)."""
    sections, cur = {}, None
    for raw in pathlib.Path(path).read_text().splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        m = re.fullmatch(r"\[(.+)\]", line)
        if m:
            cur = sections.setdefault(m.group(1), [])
            continue
        k, sep, v = line.partition("=")
        assert sep and cur is not None, "not a unit file line: %r" % raw
        cur.append((k.strip(), v.strip()))
    return sections


def unit_value(unit, section, key):
    """The value in effect (the last assignment), None when unset."""
    values = [v for k, v in unit.get(section, []) if k == key]
    return values[-1] if values else None


def test_unit_file_settings():
    unit = read_unit(UNIT)
    svc = lambda key: unit_value(unit, "Service", key)     # noqa: E731
    assert svc("Type") == "notify"
    assert svc("NotifyAccess") in (None, "main", "all"), svc("NotifyAccess")
    assert svc("DynamicUser") in ("yes", "true", "1", "on")
    assert svc("ProtectSystem") == "strict"
    state = svc("StateDirectory")
    assert state, "no StateDirectory (ProtectSystem=strict leaves nothing else writable)"
    assert re.fullmatch(r"(/usr)?/bin/kill\s+(-HUP|-SIGHUP|-s\s*(SIG)?HUP|--signal[= ](SIG)?HUP)"
                        r"\s+\$MAINPID", svc("ExecReload") or ""), svc("ExecReload")
    # the daemon, with the configuration in its ConfigurationDirectory
    exec_start = (svc("ExecStart") or "").split()
    assert exec_start and os.path.basename(exec_start[0]) == "tierproxy", exec_start
    assert "-c" in exec_start, exec_start
    config = exec_start[exec_start.index("-c") + 1]
    conf_dir = svc("ConfigurationDirectory")
    if conf_dir:
        assert config.startswith("/etc/%s/" % conf_dir.split()[0]), (config, conf_dir)
    # the catalog in the state directory, the only place it can be written: the installed
    # configuration names it (test_day2_install.py); a TIERPROXY_* variable here would
    # override the file, so that editing the file changed nothing
    env = " ".join(v for k, v in unit.get("Service", []) if k == "Environment")
    assert "TIERPROXY_" not in env, "Environment=%r overrides the configuration file" % env
    assert svc("LogsDirectory"), "no LogsDirectory (the access log and logrotate's directory)"
    # SIGTERM drains for up to 10 s (SPEC.md): systemd must wait longer before SIGKILL
    assert svc("KillSignal") in (None, "SIGTERM", "TERM", "15"), svc("KillSignal")
    stop = svc("TimeoutStopSec")
    if stop is not None:
        assert re.fullmatch(r"\d+s?", stop) and int(stop.rstrip("s")) > 10, stop
    assert svc("KillMode") in (None, "control-group", "mixed"), svc("KillMode")
    assert unit_value(unit, "Install", "WantedBy") == "multi-user.target"


def test_systemd_analyze_verify(tmp_path):
    analyze = conftest.require_program("systemd-analyze", "systemd")
    binary = os.path.abspath(conftest.REAL_TIERPROXY_BIN)
    assert os.access(binary, os.X_OK), binary
    text = UNIT.read_text()
    copy, n = re.subn(r"(?m)^(ExecStart=[-@:+!]*)\S+", lambda m: m.group(1) + binary, text)
    assert n == 1, "ExecStart= not found once in %s" % UNIT
    path = tmp_path / "tierproxy.service"
    path.write_text(copy)
    # --man=no: Documentation= names the man pages, installed by meson install and checked
    # there (test_day2_install.py), not on this host
    cp = subprocess.run([analyze, "verify", "--man=no", str(path)], capture_output=True,
                        text=True, timeout=60, cwd=str(tmp_path), stdin=subprocess.DEVNULL)
    out = (cp.stdout + cp.stderr).strip()
    assert cp.returncode == 0 and out == "", \
        "systemd-analyze verify (exit %d):\n%s" % (cp.returncode, out)
