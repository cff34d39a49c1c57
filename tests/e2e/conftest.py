"""End-to-end harness: real redis-server, real upstream (upstream.py), a catalog built with
tierctl, and tierproxy started from an INI file in the test's temporary directory.
Everything listens on 127.0.0.1 on ports picked free.

Binaries: TIERPROXY_BIN (default build/proxy/tierproxy), TIERCTL_BIN (default
build/tiers/tierctl); meson's e2e test sets both to the built targets.

Fixtures:
  catalog           a Catalog (tierctl wrapper) on a fresh plans.db, already `init`ed
  store             "memory" / "redis": proxy-level tests run once per store
  start_proxy(catalog, **kw)   a Proxy with the parametrized store (see Proxies.start)
  proxies           the same factory without the store parameter (store= given explicitly)
  upstream          a shared upstream for the session; upstream_factory() for private ones
  redis             a shared redis-server for the session; redis_factory() for private ones
  redis_cluster     a shared Redis Cluster (3 masters + 3 replicas) for the session (cluster.py);
                    redis_cluster_factory() for a private one a test may kill or reshard
"""
import atexit
import base64
import http.client
import itertools
import json
import os
import pathlib
import random
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
TIERPROXY_BIN = os.environ.get("TIERPROXY_BIN", str(ROOT / "build" / "proxy" / "tierproxy"))
TIERCTL_BIN = os.environ.get("TIERCTL_BIN", str(ROOT / "build" / "tiers" / "tierctl"))
REDIS_SERVER = os.environ.get("REDIS_SERVER_BIN", "/usr/bin/redis-server")
PYTHON = sys.executable
SANITIZED = "sanitize" in os.environ.get("TIERPROXY_BUILD_KIND", "") or "asan" in TIERPROXY_BIN
# E2E_VALGRIND=1 (opt-in; etc/valgrind.sh sets it): every tierproxy the harness starts runs
# under valgrind's memcheck, and so do the tierproxy and tierctl the tests run themselves
# (TIERPROXY_BIN and TIERCTL_BIN become wrapper scripts). See "valgrind" below.
VALGRIND = os.environ.get("E2E_VALGRIND", "").lower() not in ("", "0", "no", "off")
# Sanitized builds start and run slower; scale the harness's own waits (never the
# product's limits). valgrind is 20-50 times slower on CPU-bound work.
SLOW = float(os.environ.get("E2E_VALGRIND_SLOW", "6")) if VALGRIND else \
    3.0 if SANITIZED else 1.0
TEST_TIMEOUT_S = int(os.environ.get("E2E_TEST_TIMEOUT", "150"))

# Lines a sanitizer or a runtime error check prints; any of them on the proxy's stderr
# fails the test that ran the proxy.
BAD_STDERR = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|"
                        r"runtime error:|ThreadSanitizer|\bSEGV\b|double free|"
                        r"stack smashing|malloc\(\): |free\(\): ")

_children = []          # every process the harness started, for a last-resort cleanup
_counter = itertools.count(1)


def _kill_all_children():
    for p in _children:
        if p.poll() is None:
            try:
                p.kill()
                p.wait(5)
            except Exception:
                pass


atexit.register(_kill_all_children)


def require_program(name, package):
    """The path of an external program a test runs (a bare name is looked up on PATH).
    When it is missing the test fails, naming the Debian package: etc/setup.sh installs
    every program the suite runs, so a missing one is a broken set-up, never a reason to
    skip (a skip would hide it, as a FileNotFoundError from deep inside a test obscures it)."""
    import shutil
    path = shutil.which(name)
    if path is None:
        pytest.fail("%s is not installed (Debian package %s; etc/setup.sh installs it)"
                    % (name, package), pytrace=False)
    return path


# --------------------------------------------------------------------------------------
# valgrind (E2E_VALGRIND=1)
#
# Every tierproxy a Proxy starts runs as `valgrind OPTIONS --log-file=LOG tierproxy ...`;
# Proxy.stop() (so the proxies fixture's teardown) fails the test when valgrind found
# anything: the exit status VALGRIND_RC, "definitely lost"/"indirectly lost" above 0, or
# any memory error (invalid read/write/free, use of uninitialised values, ...). A proxy
# that was SIGKILLed has no leak summary: only its memory errors are checked.
# TIERPROXY_BIN and TIERCTL_BIN (this module's names, and TIERCTL_BIN in the environment,
# which test_tierctl.py reads) point to wrapper scripts doing the same, so `tierproxy
# --check` and the tierctl runs the tests make themselves are checked too, by an autouse
# fixture after each test. The Catalog helper (set-up of every test) runs tierctl
# directly unless E2E_VALGRIND_TIERCTL=all: under valgrind each run costs ~1 s.
#
#   E2E_VALGRIND_DIR     where the logs go (default: a new /tmp/tierproxy-valgrind-*)
#   E2E_VALGRIND_OPTS    more valgrind options (--track-origins=yes, --suppressions=F)
#   E2E_VALGRIND_SLOW    the harness's wait factor (SLOW) under valgrind, default 6
#   E2E_VALGRIND_TIERCTL "all": the Catalog helper's tierctl too; "no": no tierctl at all
#
# Logs are named <program>.<test>.<proxyN>.log (a Proxy) or <program>.<test>.pid<PID>.log
# (a wrapper run); valgrind_log_problems() reads one (etc/valgrind.sh uses it too).

VALGRIND_RC = 97        # valgrind's --error-exitcode: no tierproxy/tierctl exit status
VALGRIND_BIN = os.environ.get("VALGRIND_BIN", "valgrind")
VALGRIND_OPTS = ["--leak-check=full", "--show-leak-kinds=definite,indirect",
                 "--errors-for-leak-kinds=definite,indirect",
                 "--error-exitcode=%d" % VALGRIND_RC, "--num-callers=40",
                 # threads take turns fairly (valgrind runs one at a time)
                 "--fair-sched=yes"] + os.environ.get("E2E_VALGRIND_OPTS", "").split()
REAL_TIERPROXY_BIN = TIERPROXY_BIN
REAL_TIERCTL_BIN = TIERCTL_BIN
CATALOG_TIERCTL_BIN = TIERCTL_BIN      # what the Catalog helper runs
_vg_tag = "session"                    # the running test, for log names


def valgrind_argv(log_file):
    return [VALGRIND_BIN] + VALGRIND_OPTS + ["--log-file=%s" % log_file]


def _valgrind_tag(nodeid):
    nodeid = re.sub(r"^([^:]*/)?(test_)?", "", nodeid.replace(".py::", "::"), count=1)
    tag = re.sub(r"[^A-Za-z0-9_.=-]+", "_", nodeid)
    return tag[-150:].strip("_.") or "test"


def _write_valgrind_wrapper(real, name):
    """A script that runs `real` under valgrind with a log per process."""
    import shlex
    path = VALGRIND_DIR / "bin" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    log = "%s/%s.${E2E_VALGRIND_TAG:-untagged}.pid%%p.log" % (VALGRIND_DIR, name)
    path.write_text("#!/bin/sh\nexec %s \"--log-file=%s\" %s \"$@\"\n" % (
        " ".join(shlex.quote(a) for a in [VALGRIND_BIN] + VALGRIND_OPTS), log,
        shlex.quote(real)))
    path.chmod(0o755)
    return str(path)


if VALGRIND:
    import shutil
    import tempfile
    if shutil.which(VALGRIND_BIN) is None:
        raise RuntimeError("E2E_VALGRIND is set but %s is not installed" % VALGRIND_BIN)
    VALGRIND_DIR = pathlib.Path(os.environ.get("E2E_VALGRIND_DIR") or
                                tempfile.mkdtemp(prefix="tierproxy-valgrind-")).resolve()
    VALGRIND_DIR.mkdir(parents=True, exist_ok=True)
    TIERPROXY_BIN = _write_valgrind_wrapper(REAL_TIERPROXY_BIN, "tierproxy")
    _tierctl_mode = os.environ.get("E2E_VALGRIND_TIERCTL", "tests").lower()
    if _tierctl_mode not in ("no", "0", "off"):
        TIERCTL_BIN = _write_valgrind_wrapper(REAL_TIERCTL_BIN, "tierctl")
        os.environ["TIERCTL_BIN"] = TIERCTL_BIN       # test_tierctl.py reads it there
        if _tierctl_mode == "all":
            CATALOG_TIERCTL_BIN = TIERCTL_BIN
else:
    VALGRIND_DIR = None

_VG_PREFIX = re.compile(r"^==\d+== ?", re.M)
# the first line of each kind of memory error memcheck reports
_VG_ERROR = re.compile(r"^(Invalid (read|write|free)|Mismatched free|"
                       r"Conditional jump or move depends on uninitialised|"
                       r"Use of uninitialised value|Syscall param .* (uninitialised|"
                       r"unaddressable)|Source and destination overlap|"
                       r"Jump to the invalid address|Argument .* of function .* fishy|"
                       r"Process terminating with default action of signal (4|6|7|8|11) )")


def valgrind_log_problems(path):
    """Reads a memcheck log. Returns (problems, finished): problems is a list of
    strings (empty when clean); finished says whether the log has valgrind's final
    summary (a process SIGKILLed or still running has none, so no leak check)."""
    try:
        text = pathlib.Path(path).read_text(errors="replace")
    except FileNotFoundError:
        return ["no valgrind log at %s" % path], False
    text = _VG_PREFIX.sub("", text)
    lines = text.splitlines()
    problems = []
    summary = re.search(r"^ERROR SUMMARY: ([\d,]+) errors? from ([\d,]+) context", text, re.M)
    finished = summary is not None
    errors = [ln for ln in lines if _VG_ERROR.search(ln)]
    if errors:
        problems.append("%d memory error(s), first: %s" % (len(errors), errors[0]))
    for kind in ("definitely", "indirectly"):
        m = re.search(r"^ +%s lost: ([\d,]+) bytes in ([\d,]+) blocks" % kind, text, re.M)
        if m and m.group(1).replace(",", "") != "0":
            problems.append("%s lost: %s bytes in %s blocks" % (kind, m.group(1), m.group(2)))
    if summary and summary.group(1) != "0" and not problems:
        problems.append("ERROR SUMMARY: %s errors" % summary.group(1))
    return problems, finished


def valgrind_log_excerpt(path, limit=6000):
    """The log without its banner: the error reports, leak records and summaries."""
    try:
        text = _VG_PREFIX.sub("", pathlib.Path(path).read_text(errors="replace"))
    except FileNotFoundError:
        return ""
    start = text.find("Parent PID:")
    if start >= 0:
        text = text[text.find("\n", start) + 1:]
    text = re.sub(r"(?m)^(Reachable blocks|To see them|For lists of|For counts of).*\n", "", text)
    text = re.sub(r"\n{3,}", "\n\n", text.strip("\n"))
    if len(text) > limit:
        text = text[:limit] + "\n[... %d more characters in %s]" % (len(text) - limit, path)
    return text


def check_valgrind_log(path, what, rc=None):
    """Problems (list of strings) of one process run under valgrind; rc its exit status
    when known."""
    problems, finished = valgrind_log_problems(path)
    if rc == VALGRIND_RC and not problems:
        problems.append("exited with valgrind's error status %d" % VALGRIND_RC)
    if not problems:
        return []
    return ["%s: valgrind: %s (log %s)\n--- valgrind log ---\n%s"
            % (what, "; ".join(problems), path, valgrind_log_excerpt(path))]


# Tests that cannot hold under valgrind (node id without parameters -> why). Latency
# bounds do not belong here: they are scaled by SLOW.
VALGRIND_SKIP = {
    "test_faults.py::test_out_of_file_descriptors":
        "valgrind keeps descriptors of its own under the proxy's RLIMIT_NOFILE, so the test "
        "cannot bring the proxy to exactly its limit of 64",
}


if VALGRIND:
    def pytest_report_header(config):
        return "E2E_VALGRIND: tierproxy under valgrind, logs in %s, SLOW %g" % (VALGRIND_DIR, SLOW)

    def pytest_collection_modifyitems(config, items):
        for item in items:
            base = item.nodeid.split("[", 1)[0]
            for nodeid, why in VALGRIND_SKIP.items():
                if base == nodeid or base.endswith("/" + nodeid):
                    item.add_marker(pytest.mark.skip(reason="under valgrind: " + why))

    @pytest.fixture(autouse=True)
    def _valgrind_wrapped_runs():
        """Checks the logs of the wrapped tierproxy/tierctl runs a test made itself."""
        def wrapped():
            return {p for p in VALGRIND_DIR.glob("*.log") if re.search(r"\.pid\d+\.log$", p.name)}
        before = wrapped()
        yield
        problems = []
        for log in sorted(wrapped() - before):
            problems += check_valgrind_log(log, log.name.split(".", 1)[0])
        if problems:
            pytest.fail("\n".join(problems), pytrace=False)


def _clean_env(extra=None):
    """The environment for the programs under test: no TIERPROXY_* variables from the
    caller (they would override the INI file), sanitizer options kept."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERPROXY_")}
    env.update(extra or {})
    return env


def _port_pool():
    """Ports outside the kernel's ephemeral range, so that no outgoing connection (curl,
    hiredis, the tests' own clients) can take a port between picking it and binding it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = map(int, f.read().split())
    except (OSError, ValueError):
        lo, hi = 32768, 60999
    if lo - 1 - 10000 >= 5000:
        return 10000, lo - 1
    return hi + 1, 65000


_used_ports = set()
_rng = random.Random(os.getpid() ^ int(time.time() * 1000))


def free_port():
    """A free TCP port on 127.0.0.1, never handed out twice in this session."""
    a, b = _port_pool()
    for _ in range(500):
        port = _rng.randint(a, b)
        if port in _used_ports:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _used_ports.add(port)
        return port
    raise RuntimeError("no free port found in %d-%d" % (a, b))


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(pred, timeout, interval=0.05):
    """Polls pred() until it returns a true value or timeout seconds pass. Returns the last
    value of pred()."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def freeze_process(pid, timeout=10):
    """SIGSTOP, then waits until every thread of pid is stopped. The stop is not at once for a
    multi-threaded process: the thread the kernel hands the signal to must run first, and
    on a loaded box another thread can meanwhile answer a request (seen: a frozen upstream's
    connection thread answered 1 ms after the kill)."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped():
        try:   # the state is the field after the ")" that ends the command name
            stats = [pathlib.Path("/proc/%d/task/%s/stat" % (pid, t)).read_text()
                     for t in os.listdir("/proc/%d/task" % pid)]
            states = [st.rsplit(")", 1)[1].split()[0] for st in stats]
        except (FileNotFoundError, ProcessLookupError):
            return False
        return bool(states) and all(st in ("T", "t") for st in states)
    if not wait_until(all_stopped, timeout, interval=0.005):
        raise RuntimeError("process %d did not stop within %s s of SIGSTOP" % (pid, timeout))


# --------------------------------------------------------------------------------------
# HTTP client: http.client with the request target sent exactly as given.

class Resp:
    def __init__(self, status, reason, headers, body, elapsed, t_sent, t_done):
        self.status = status
        self.reason = reason
        self.headers = headers      # [(name, value)] in order, repeats kept
        self.body = body
        self.elapsed = elapsed
        self.t_sent = t_sent        # time.time() just before the request was written
        self.t_done = t_done        # time.time() when the whole response was read

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def has_header(self, name):
        return any(k.lower() == name.lower() for k, _ in self.headers)

    def json(self):
        return json.loads(self.body)

    @property
    def echo(self):
        """The request as the upstream received it (upstream.py's echo)."""
        e = json.loads(self.body)
        e["body"] = base64.b64decode(e["body_b64"])
        return e

    def __repr__(self):
        return "<Resp %s %r %r>" % (self.status, self.headers, self.body[:300])


def echo_header(echo, name):
    return [v for k, v in echo["headers"] if k.lower() == name.lower()]


class Client:
    """One persistent (keep-alive) connection; not thread-safe: one per thread."""

    def __init__(self, port, host="127.0.0.1", source=None, timeout=30):
        self.port, self.host, self.source, self.timeout = port, host, source, timeout
        self.conn = None

    def _connect(self):
        self.conn = http.client.HTTPConnection(
            self.host, self.port, timeout=self.timeout,
            source_address=(self.source, 0) if self.source else None)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, target, headers=(), body=None, key=None, chunked=False):
        if self.conn is None:
            self._connect()
        headers = list(headers)
        if key is not None:
            headers.append(("Authorization", "Bearer " + key))
        names = {k.lower() for k, _ in headers}
        c = self.conn
        t_sent = time.time()
        t0 = time.monotonic()
        try:
            c.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
            if "host" not in names:
                c.putheader("Host", "127.0.0.1:%d" % self.port)
            for k, v in headers:
                c.putheader(k, v)
            if chunked:
                c.putheader("Transfer-Encoding", "chunked")
                c.endheaders()
                data = body or b""
                for i in range(0, len(data), 65536):
                    piece = data[i:i + 65536]
                    c.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
                c.send(b"0\r\n\r\n")
            else:
                if body is not None and "content-length" not in names \
                        and "transfer-encoding" not in names:
                    c.putheader("Content-Length", str(len(body)))
                c.endheaders(body)
            r = c.getresponse()
            data = r.read()
        except Exception:
            self.close()
            raise
        resp = Resp(r.status, r.reason, list(r.getheaders()), data,
                    time.monotonic() - t0, t_sent, time.time())
        if r.will_close:
            self.close()
        return resp

    def get(self, target, **kw):
        return self.request("GET", target, **kw)


def http_request(port, method, target, host="127.0.0.1", source=None, timeout=30, **kw):
    """One request on a fresh connection."""
    c = Client(port, host=host, source=source, timeout=timeout)
    try:
        return c.request(method, target, **kw)
    finally:
        c.close()


def read_answer(sock, timeout=None):
    """Everything the server sends until it closes or a whole Content-Length answer is
    in; b"" when nothing came within timeout."""
    if timeout is not None:
        sock.settimeout(timeout)
    out = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                if m and len(rest) >= int(m.group(1)):
                    break
    except (socket.timeout, ConnectionError):
        pass
    return out


def raw_exchange(port, data, timeout=10, host="127.0.0.1"):
    """Sends raw bytes, returns everything read until the server closes or goes quiet."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        try:
            s.sendall(data)
        except OSError:
            pass      # the server may answer and close before reading everything
        return read_answer(s)


def parse_raw_response(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    assert m, "not an HTTP/1.x response: %r" % raw[:200]
    status = int(m.group(1))
    headers = []
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers.append((k.strip(), v.strip()))
    return Resp(status, "", headers, body, 0, 0, 0)


# --------------------------------------------------------------------------------------
# redis-server

def resp_encode(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def resp_read(f):
    line = f.readline()
    if not line:
        raise ConnectionError("redis closed the connection")
    t, rest = line[:1], line[1:-2]
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RuntimeError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [resp_read(f) for _ in range(n)]
    raise RuntimeError("bad RESP line %r" % line)


def redis_cmd(port, *args, timeout=5):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(resp_encode(*args))
        return resp_read(s.makefile("rb"))


class RedisServer:
    def __init__(self, tmpdir, port=None):
        self.tmpdir = pathlib.Path(tmpdir)
        self.port = port or free_port()
        self.proc = None
        self.start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    def start(self):
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        log = open(self.tmpdir / ("redis-%d.log" % self.port), "ab")
        self.proc = subprocess.Popen(
            [require_program(REDIS_SERVER, "redis-server"), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", str(self.tmpdir), "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        _children.append(self.proc)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited with %s" % self.proc.returncode)
            try:
                return redis_cmd(self.port, "PING", timeout=1) == "PONG"
            except OSError:
                return False
        if not wait_until(ready, 10):
            raise RuntimeError("redis-server did not answer PING on port %d" % self.port)

    def cmd(self, *args):
        return redis_cmd(self.port, *args)

    def stop(self):
        """Kills the server (as a crash or an outage would) and waits for it."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def pause(self):
        """Freezes the server: connections stay open but nothing answers."""
        freeze_process(self.proc.pid)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self):
        if self.proc and self.proc.poll() is None:
            try:
                self.resume()
            except OSError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# --------------------------------------------------------------------------------------
# upstream

def stop_test_server(proc):
    """Stops a server spawn_test_server started: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    if proc.stdout:
        proc.stdout.close()


def spawn_test_server(script, err_path, port=0):
    """Starts one of the test servers here on port (0: one it picks; it prints the port
    it bound); returns (process, port)."""
    err = open(err_path, "ab")
    proc = subprocess.Popen([PYTHON, str(HERE / script), "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=err, stdin=subprocess.DEVNULL)
    err.close()
    _children.append(proc)
    line = proc.stdout.readline()
    if not line.strip():
        raise RuntimeError("%s did not print its port" % script)
    return proc, int(line)


class Upstream:
    def __init__(self, tmpdir):
        self.tmpdir = pathlib.Path(tmpdir)
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self.proc, self.port = spawn_test_server("upstream.py",
                                                 self.tmpdir / ("upstream-%d.err" % next(_counter)))
        self.url = "http://127.0.0.1:%d" % self.port

    def stats(self):
        return http_request(self.port, "GET", "/__stats").json()

    def release(self, gate):
        http_request(self.port, "POST", "/__release/" + gate, body=b"")

    def close(self):
        stop_test_server(self.proc)


# --------------------------------------------------------------------------------------
# catalog (tierctl)

class TierctlError(AssertionError):
    pass


class Catalog:
    def __init__(self, path):
        self.path = pathlib.Path(path)
        self._ids = itertools.count(1)

    def run(self, *args, check=True, timeout=60):
        """Runs `tierctl --db PATH ARGS...`. Returns the CompletedProcess (text)."""
        cmd = [CATALOG_TIERCTL_BIN, "--db", str(self.path)] + [str(a) for a in args]
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                            env=_clean_env(), stdin=subprocess.DEVNULL)
        if check and cp.returncode != 0:
            raise TierctlError("%s exited %d\nstdout: %s\nstderr: %s"
                               % (" ".join(cmd), cp.returncode, cp.stdout, cp.stderr))
        return cp

    def init(self):
        self.run("init")
        return self

    def plan(self, name, *flags):
        """`plan add NAME FLAGS...`"""
        self.run("plan", "add", name, *flags)
        return name

    def limit(self, plan, *flags):
        """`limit add PLAN FLAGS...`"""
        return self.run("limit", "add", plan, *flags)

    def user(self, plan, user_id=None):
        user_id = user_id or "user%d" % next(self._ids)
        self.run("user", "add", user_id, "--plan", plan)
        return user_id

    def key(self, user, label=None):
        """`key create USER`: returns the key (the last line on stdout)."""
        args = ["key", "create", user] + (["--label", label] if label else [])
        out = self.run(*args).stdout
        lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
        assert lines, "key create printed nothing"
        return lines[-1]

    def user_key(self, plan):
        """A new user on plan with one key. Returns (user, key)."""
        u = self.user(plan)
        return u, self.key(u)

    def key_ids(self, user):
        """Key ids of a user, from `key list USER --json`."""
        out = self.run("key", "list", user, "--json").stdout
        data = json.loads(out)
        if isinstance(data, dict):
            data = data.get("keys", [])
        ids = []
        for k in data:
            for name in ("id", "key_id", "keyid"):
                if name in k:
                    ids.append(k[name])
                    break
        return ids


# --------------------------------------------------------------------------------------
# tierproxy

class ProxyStartError(AssertionError):
    pass


class Proxy:
    def __init__(self, tmpdir, ini, env=None, args=()):
        n = next(_counter)
        self.tmpdir = pathlib.Path(tmpdir)
        self.ini = ini
        self.name = "proxy%d" % n
        self.ini_path = self.tmpdir / ("%s.ini" % self.name)
        self.stdout_path = self.tmpdir / ("%s.stdout" % self.name)
        self.stderr_path = self.tmpdir / ("%s.stderr" % self.name)
        self.port = int(ini["proxy"]["listen"].rsplit(":", 1)[1])
        admin = ini.get("admin", {}).get("listen") or ""
        self.admin_port = int(admin.rsplit(":", 1)[1]) if admin else None
        self.access_log = ini.get("log", {}).get("access")
        self.expected_rc = 0
        self.stopped = False
        write_ini(self.ini_path, ini)
        out = open(self.stdout_path, "wb")
        err = open(self.stderr_path, "wb")
        self.cmd = [REAL_TIERPROXY_BIN, "-c", str(self.ini_path)] + list(args)
        self.valgrind_log = None
        self.valgrind_checked = False
        if VALGRIND:
            self.valgrind_log = VALGRIND_DIR / ("tierproxy.%s.%s.log" % (_vg_tag, self.name))
            self.cmd = valgrind_argv(self.valgrind_log) + self.cmd
        self.proc = subprocess.Popen(self.cmd, stdout=out, stderr=err,
                                     stdin=subprocess.DEVNULL, env=_clean_env(env),
                                     cwd=str(self.tmpdir))
        out.close()
        err.close()
        _children.append(self.proc)

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def wait_ready(self, timeout=15):
        def ready():
            if self.proc.poll() is not None:
                raise ProxyStartError("tierproxy exited with %s before listening\n%s"
                                      % (self.proc.returncode, self.stderr()[-3000:]))
            # the admin listener starts just after the workers listen (seconds later under
            # valgrind), and some tests use it at once
            if self.admin_port and port_open(self.port):
                return port_open(self.admin_port)
            return port_open(self.port)
        if not wait_until(ready, timeout * SLOW):
            raise ProxyStartError("tierproxy did not listen on %d within %ss\n%s"
                                  % (self.port, timeout * SLOW, self.stderr()[-3000:]))
        return self

    def stderr(self):
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def access_log_lines(self):
        """Parsed JSON lines of the access log (a file when [log] access is a path)."""
        path = pathlib.Path(self.access_log)
        if not path.exists():
            return []
        text = path.read_text()
        if not text.endswith("\n"):
            text = text[:text.rfind("\n") + 1]   # a line still being written
        return [json.loads(ln) for ln in text.splitlines() if ln.strip()]

    # requests
    def request(self, method, target, **kw):
        return http_request(self.port, method, target, **kw)

    def get(self, target, **kw):
        return self.request("GET", target, **kw)

    def client(self, **kw):
        return Client(self.port, **kw)

    def admin(self, target):
        assert self.admin_port, "no [admin] listen configured"
        assert wait_until(lambda: port_open(self.admin_port), 5 * SLOW), \
            "nothing listens on the admin port %d" % self.admin_port
        return http_request(self.admin_port, "GET", target)

    def signal(self, sig):
        self.proc.send_signal(sig)

    def stop(self, timeout=15):
        """SIGTERM, then SIGKILL after timeout. Returns a list of problems (empty when the
        proxy exited as expected and its stderr is clean)."""
        problems = []
        if self.stopped:
            # stopped (or waited for) by the test itself: valgrind's verdict is still due
            return self.valgrind_problems()
        self.stopped = True
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                problems.append("%s did not exit within %ss of SIGTERM (killed)"
                                % (self.name, timeout * SLOW))
        rc = self.proc.returncode
        if rc != self.expected_rc and not problems and \
                not (self.valgrind_log and rc == VALGRIND_RC):
            problems.append("%s exited with %s (expected %s)" % (self.name, rc, self.expected_rc))
        err = self.stderr()
        bad = [ln for ln in err.splitlines() if BAD_STDERR.search(ln)]
        if bad:
            problems.append("%s stderr has sanitizer/runtime errors:\n%s"
                            % (self.name, "\n".join(bad[:20])))
        if problems:
            problems.append("--- %s stderr (tail) ---\n%s" % (self.name, err[-4000:]))
        return problems + self.valgrind_problems()

    def valgrind_problems(self):
        """Under E2E_VALGRIND: what valgrind found in this proxy (once it has exited; a
        SIGKILLed one has no leak summary, so only its memory errors count)."""
        if self.valgrind_log is None or self.valgrind_checked or self.proc.poll() is None:
            return []
        self.valgrind_checked = True
        return check_valgrind_log(self.valgrind_log, self.name, self.proc.returncode)


def write_ini(path, ini):
    with open(path, "w") as f:
        for section, kv in ini.items():
            f.write("[%s]\n" % section)
            for k, v in kv.items():
                if v is None:
                    continue
                if isinstance(v, bool):
                    v = "yes" if v else "no"
                f.write("%s = %s\n" % (k, v))
            f.write("\n")


class Proxies:
    """Factory for tierproxy instances; stops them all at teardown and fails the test if
    one exited abnormally or its stderr shows sanitizer or runtime errors."""

    def __init__(self, tmpdir, request):
        self.tmpdir = pathlib.Path(tmpdir)
        self.request = request
        self.started = []

    def config(self, catalog, upstream=None, upstreams=None, store="memory", redis=None,
               key_prefix=None, **sections):
        """The INI dict for a proxy. sections: proxy={...}, auth={...}, ... override or add
        keys (a value of None removes the key)."""
        if upstreams is None:
            if upstream is None:
                upstream = self.request.getfixturevalue("upstream")
            upstreams = [upstream]
        ups = ",".join(u if isinstance(u, str) else u.url for u in upstreams)
        n = next(_counter)
        ini = {
            "proxy": {"listen": "127.0.0.1:%d" % free_port(), "upstream": ups,
                      "workers": 2, "connect_timeout_ms": 2000,
                      "upstream_timeout_ms": 30000, "max_body_bytes": 10485760},
            "admin": {"listen": "127.0.0.1:%d" % free_port()},
            "auth": {},
            "plans": {"db": str(catalog.path), "refresh_ms": 200},
            "limits": {"store": store},
            "log": {"access": str(self.tmpdir / ("access-%d.log" % n)), "level": "info"},
        }
        if store == "redis":
            if redis is None:
                redis = self.request.getfixturevalue("redis")
            ini["limits"]["redis"] = redis.url
            # a prefix of its own, so tests sharing the session's redis never share state
            ini["limits"]["key_prefix"] = key_prefix or "tpt%d_%d:" % (os.getpid(), n)
        elif key_prefix:
            ini["limits"]["key_prefix"] = key_prefix
        for section, kv in sections.items():
            ini.setdefault(section, {})
            for k, v in kv.items():
                if v is None:
                    ini[section].pop(k, None)
                else:
                    ini[section][k] = v
        return ini

    def start(self, catalog, env=None, args=(), wait=True, **kw):
        for attempt in range(3):
            ini = self.config(catalog, **kw)
            p = Proxy(self.tmpdir, ini, env=env, args=args)
            self.started.append(p)
            if not wait:
                return p
            try:
                return p.wait_ready()
            except ProxyStartError as e:
                # a port picked free was taken by someone else before the proxy bound it
                # (another test run on this machine): pick new ports and try again
                if attempt == 2 or p.proc.poll() is None or \
                        not re.search(r"listen|in use", p.stderr(), re.I):
                    raise
                p.expected_rc = p.proc.returncode
                sys.stderr.write("proxy could not listen, retrying with new ports: %s\n" % e)

    def start_ini(self, ini, env=None, args=(), wait=True):
        p = Proxy(self.tmpdir, ini, env=env, args=args)
        self.started.append(p)
        if wait:
            p.wait_ready()
        return p

    def stop_all(self):
        problems = []
        for p in self.started:
            problems += p.stop()
        return problems


# --------------------------------------------------------------------------------------
# fixtures

@pytest.fixture(scope="session")
def session_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("session")


@pytest.fixture(scope="session")
def redis(session_tmp):
    r = RedisServer(session_tmp / "redis")
    yield r
    r.close()


@pytest.fixture(scope="session")
def redis_cluster(session_tmp):
    """A real Redis Cluster (3 masters, 3 replicas) for the session: see cluster.py."""
    from cluster import RedisCluster
    c = RedisCluster(session_tmp / "cluster", free_port, redis_cmd, wait_until,
                     require_program(REDIS_SERVER, "redis-server"), _children)
    yield c
    c.close()


@pytest.fixture
def redis_cluster_factory(tmp_path):
    """redis_cluster_factory() -> a private Redis Cluster this test may kill or reshard."""
    from cluster import RedisCluster
    made = []

    def make():
        c = RedisCluster(tmp_path / ("cluster%d" % len(made)), free_port, redis_cmd, wait_until,
                         require_program(REDIS_SERVER, "redis-server"), _children)
        made.append(c)
        return c
    yield make
    for c in made:
        c.close()


@pytest.fixture
def redis_factory(tmp_path):
    made = []

    def make(port=None):
        r = RedisServer(tmp_path / "redis", port=port)
        made.append(r)
        return r
    yield make
    for r in made:
        r.close()


@pytest.fixture(scope="session")
def upstream(session_tmp):
    u = Upstream(session_tmp)
    yield u
    u.close()


@pytest.fixture
def upstream_factory(tmp_path):
    made = []

    def make():
        u = Upstream(tmp_path)
        made.append(u)
        return u
    yield make
    for u in made:
        u.close()


@pytest.fixture
def catalog(tmp_path):
    return Catalog(tmp_path / "plans.db").init()


@pytest.fixture
def proxies(tmp_path, request):
    f = Proxies(tmp_path, request)
    yield f
    problems = f.stop_all()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture(params=["memory", "redis"])
def store(request):
    return request.param


@pytest.fixture
def start_proxy(proxies, store):
    """start_proxy(catalog, **kw) -> Proxy on the parametrized store."""
    def start(catalog, **kw):
        kw.setdefault("store", store)
        return proxies.start(catalog, **kw)
    return start


# --------------------------------------------------------------------------------------
# a per-test time limit, so one hung test cannot eat the whole suite's meson timeout

class TestTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise TestTimeout("test exceeded %ss (E2E_TEST_TIMEOUT)" % TEST_TIMEOUT_S)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if VALGRIND:
        global _vg_tag
        _vg_tag = _valgrind_tag(item.nodeid)
        os.environ["E2E_VALGRIND_TAG"] = _vg_tag     # the wrapper scripts' log names
    old = signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(int(TEST_TIMEOUT_S * SLOW))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def pytest_sessionfinish(session, exitstatus):
    _kill_all_children()


# --------------------------------------------------------------------------------------
# assertions shared by the tests

def assert_json_error(r, status, expected=None):
    """r is an error answer from the proxy: the status, an RFC 9457 problem body
    (Content-Type application/problem+json; type, title, detail, status), holding every
    member of `expected` when given. Returns the parsed body."""
    assert r.status == status, "expected %d, got %r" % (status, r)
    ct = (r.header("Content-Type") or "").split(";")[0].strip().lower()
    assert ct == "application/problem+json", \
        "error answer without Content-Type application/problem+json: %r" % r
    try:
        body = json.loads(r.body)
    except ValueError:
        raise AssertionError("error body is not JSON: %r" % r.body[:500])
    assert isinstance(body, dict), body
    for member in ("type", "title", "detail"):
        assert isinstance(body.get(member), str) and body[member], (member, body)
    assert body.get("status") == status, body
    if expected is not None:
        assert {k: body.get(k) for k in expected} == expected, \
            "body %r lacks expected %r" % (body, expected)
    return body


def log_lines(text):
    """tierproxy's stderr (one JSON object per line: time, level, msg and fields) as a
    list of dicts; a line that is not one fails the test."""
    out = []
    for ln in text.splitlines():
        try:
            obj = json.loads(ln)
        except ValueError:
            raise AssertionError("a stderr line is not JSON: %r" % ln)
        assert isinstance(obj, dict) and "level" in obj and "msg" in obj, ln
        out.append(obj)
    return out


def retry_after_bounds(first, rejected, window_s):
    """The whole seconds a sliding log must report when `first` was the oldest admitted
    request and `rejected` was refused: ceil of the exact wait, whose bounds follow from
    when each request was sent and answered (2 ms allowed for ms rounding)."""
    import math
    wait_min = first.t_sent + window_s - rejected.t_done - 0.002
    wait_max = first.t_done + window_s - rejected.t_sent + 0.002
    return max(1, math.ceil(wait_min)), max(1, math.ceil(wait_max))


RATELIMIT_HEADER_NAMES = ("ratelimit", "ratelimit-limit", "ratelimit-remaining",
                          "ratelimit-reset", "ratelimit-policy", "x-ratelimit-limit",
                          "x-ratelimit-remaining", "x-ratelimit-reset")


def ratelimit_headers(r):
    return [(k, v) for k, v in r.headers if k.lower() in RATELIMIT_HEADER_NAMES]


def ietf_policy(r):
    """r's ietf RateLimit-Policy items as {name: q}; {} without the field."""
    return {name: params.get("q") for name, params in parse_sf_list(r.header("RateLimit-Policy") or "")}


def ietf_state(r):
    """r's ietf RateLimit items as {name: {"r": remaining, "t": reset}}; {} without it."""
    return dict(parse_sf_list(r.header("RateLimit") or ""))


def parse_sf_list(value):
    """Parses a structured-field list of items with parameters, as the ietf style uses:
    '"free";q=100;w=60, "free-2";q=10;qu="concurrent-requests"' ->
    [("free", {"q": 100, "w": 60}), ("free-2", {"q": 10, "qu": "concurrent-requests"})]."""
    items = []
    for part in re.findall(r'(?:[^,"]|"[^"]*")+', value):
        fields = re.findall(r'(?:[^;"]|"[^"]*")+', part.strip())
        name = fields[0].strip()
        assert name.startswith('"') and name.endswith('"'), "item %r is not an sf-string" % name
        params = {}
        for f in fields[1:]:
            k, _, v = f.strip().partition("=")
            v = v.strip()
            if v.startswith('"'):
                params[k] = v.strip('"')
            else:
                assert re.fullmatch(r"-?\d+", v), "param %s=%r is not an sf-integer" % (k, v)
                params[k] = int(v)
        items.append((name.strip('"'), params))
    return items
