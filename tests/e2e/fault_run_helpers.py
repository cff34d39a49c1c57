"""Helpers for the fault-injection run (test_fault_run.py):

  PasswordRedis(tmpdir, password)  a private redis-server started with --requirepass; it can
                                   be killed, shut down and started again on its port, and
                                   its password changed (cmd() follows the change)
  TimelineUpstream(tmpdir)         tests/e2e/timeline_upstream.py as a process
  Load(...)                        client threads looping HTTP requests and WebSocket
                                   tunnels through the proxies until stopped
  HealthPoller(proxies)            GET /health of each proxy every few tens of ms
  in_flight_at_arrivals(...)       from the upstream's timeline: how many were in flight
                                   at each arrival
"""
import bisect
import json
import random
import socket
import subprocess
import threading
import time

from conftest import (SLOW, RedisServer, http_request, require_program, resp_encode,
                      resp_read, spawn_test_server, stop_test_server, wait_until, REDIS_SERVER, _children)
from fleet_helpers import HandshakeRefused, ws_connect

REQUEST_TIMEOUT_S = 5.0 * SLOW     # a request or handshake taking longer is an error
TUNNEL_GRACE_S = 5.0 * SLOW        # beyond its hold, the longest a tunnel may take to close


# --------------------------------------------------------------------------------------
# Redis with a password

def redis_auth_cmd(port, password, *args, timeout=5):
    """One command on a fresh connection, AUTH password first; the reply (an error reply
    raises RuntimeError)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(resp_encode("AUTH", password) + resp_encode(*args))
        f = s.makefile("rb")
        resp_read(f)
        return resp_read(f)


class PasswordRedis(RedisServer):
    """conftest.RedisServer with --requirepass password."""

    def __init__(self, tmpdir, password, port=None):
        self.password = password
        super().__init__(tmpdir, port=port)

    @property
    def url(self):
        return "redis://:%s@127.0.0.1:%d/0" % (self.password, self.port)

    def start(self):
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        log = open(self.tmpdir / ("redis-%d.log" % self.port), "ab")
        self.proc = subprocess.Popen(
            [require_program(REDIS_SERVER, "redis-server"), "--port", str(self.port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", str(self.tmpdir), "--protected-mode", "no",
             "--requirepass", self.password],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        _children.append(self.proc)

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("redis-server exited with %s" % self.proc.returncode)
            try:
                return self.cmd("PING") == "PONG"
            except (OSError, RuntimeError):
                return False
        if not wait_until(ready, 10 * SLOW, interval=0.01):
            raise RuntimeError("redis-server did not answer PING on port %d" % self.port)

    def cmd(self, *args):
        return redis_auth_cmd(self.port, self.password, *args)

    def shutdown_nosave(self):
        """SHUTDOWN NOSAVE, then waits for the process to exit."""
        try:
            self.cmd("SHUTDOWN", "NOSAVE")
        except (OSError, ConnectionError):
            pass      # the server closes the connection instead of answering
        self.proc.wait(10)

    def change_password(self, new):
        """CONFIG SET requirepass on a connection authenticated with the current one;
        connections already authenticated stay so."""
        self.cmd("CONFIG", "SET", "requirepass", new)
        self.password = new


# --------------------------------------------------------------------------------------
# the upstream

class TimelineUpstream:
    def __init__(self, tmpdir):
        self.proc, self.port = spawn_test_server("timeline_upstream.py",
                                                 tmpdir / "timeline_upstream.err")
        self.url = "http://127.0.0.1:%d" % self.port

    def timeline(self):
        return http_request(self.port, "GET", "/__timeline", timeout=30).json()

    def close(self):
        stop_test_server(self.proc)


# --------------------------------------------------------------------------------------
# the load

class Load:
    """Per proxy (via -> port): http_threads threads looping GET /hold/<50..300 ms> and
    ws_threads threads looping WebSocket tunnels held <300..2500 ms> by the upstream, all
    as one user (key), each with the header X-Probe-Via: via. A refused attempt waits
    30-80 ms before the next (the load stays bounded while most are refused). Every
    attempt is recorded: (monotonic time sent, kind, via, outcome), outcome the status
    (200, 101, 429, 503, ...) or "error". Runs until stop()."""

    def __init__(self, ports, key, http_threads=4, ws_threads=2, seed=None):
        self.key = key
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.records = []
        self.tunnels = {}          # open tunnels: id -> (opened, ends): monotonic times
        self.rng_seed = seed if seed is not None else random.randrange(1 << 30)
        self.threads = []
        n = 0
        for via, port in sorted(ports.items()):
            for kind, count in (("http", http_threads), ("ws", ws_threads)):
                for _ in range(count):
                    n += 1
                    t = threading.Thread(target=self._run, args=(kind, via, port, n), daemon=True)
                    self.threads.append(t)

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def _record(self, t, kind, via, outcome):
        with self.lock:
            self.records.append((t, kind, via, outcome))

    def _run(self, kind, via, port, n):
        rng = random.Random(self.rng_seed + n)
        attempt = self._http if kind == "http" else self._tunnel
        for _ in range(100000):
            if self.stop_ev.is_set():
                return
            t = time.monotonic()
            outcome = attempt(rng, via, port)
            self._record(t, kind, via, outcome)
            if outcome not in (200, 101):
                self.stop_ev.wait(rng.uniform(0.03, 0.08))

    def _http(self, rng, via, port):
        try:
            r = http_request(port, "GET", "/hold/%d" % rng.randint(50, 300), key=self.key,
                             headers=[("X-Probe-Via", via)], timeout=REQUEST_TIMEOUT_S)
            return r.status
        except Exception:
            return "error"

    def _tunnel(self, rng, via, port):
        hold_ms = rng.randint(300, 2500)
        try:
            ws = ws_connect(port, "/ws/%d" % hold_ms, key=self.key,
                            headers=[("X-Probe-Via", via)], timeout=REQUEST_TIMEOUT_S)
        except HandshakeRefused as e:
            return e.resp.status
        except Exception:
            return "error"
        opened = time.monotonic()
        with self.lock:
            self.tunnels[id(ws)] = (opened, opened + hold_ms / 1000.0)
        try:
            # the upstream ends the tunnel: its close frame, answered, then EOF
            ws.sock.settimeout(hold_ms / 1000.0 + TUNNEL_GRACE_S)
            ws.recv_close()
            ws.send_close(1000)
            ws.wait_eof(TUNNEL_GRACE_S)
            return 101
        except Exception:
            return "error"
        finally:
            ws.close()
            with self.lock:
                del self.tunnels[id(ws)]

    def tunnels_open(self, opened_after=0.0, left=0.0):
        """How many tunnels are open that were opened after opened_after and have at least
        left seconds of their hold ahead."""
        now = time.monotonic()
        with self.lock:
            return sum(1 for opened, ends in self.tunnels.values()
                       if opened > opened_after and ends - now >= left)

    def stop(self):
        self.stop_ev.set()
        for t in self.threads:
            t.join(REQUEST_TIMEOUT_S + 1.5 + TUNNEL_GRACE_S * 2)
        return [t for t in self.threads if t.is_alive()]

    def outcomes(self, t_from, t_to):
        """{outcome: count} of the attempts sent in [t_from, t_to)."""
        out = {}
        with self.lock:
            for t, _, _, o in self.records:
                if t_from <= t < t_to:
                    out[o] = out.get(o, 0) + 1
        return out


# --------------------------------------------------------------------------------------
# /health, polled

class HealthPoller:
    """GET /health on each proxy's admin listener (via -> Proxy) every interval seconds
    until stopped. Samples: (monotonic time, via, "store" word or None, "store_error" or
    None, body)."""

    def __init__(self, proxies, interval=0.04):
        self.proxies = proxies
        self.interval = interval
        self.samples = []
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        while not self.stop_ev.is_set():
            for via, p in sorted(self.proxies.items()):
                t = time.monotonic()
                try:
                    body = http_request(p.admin_port, "GET", "/health", timeout=2 * SLOW).body
                    doc = json.loads(body)
                    sample = (t, via, doc.get("store"), doc.get("store_error"), body.decode())
                except Exception as e:
                    sample = (t, via, None, None, "no answer: %s" % e)
                with self.lock:
                    self.samples.append(sample)
            self.stop_ev.wait(self.interval)

    def latest(self, via):
        with self.lock:
            for s in reversed(self.samples):
                if s[1] == via:
                    return s
        return None

    def wait_for(self, pred, timeout, since):
        """Waits until the latest sample of every proxy taken after since satisfies
        pred(sample); True when they did within timeout."""
        def ok():
            latest = [self.latest(via) for via in self.proxies]
            return all(s is not None and s[0] >= since and pred(s) for s in latest)
        return wait_until(ok, timeout, interval=0.02)

    def between(self, via, t_from, t_to):
        with self.lock:
            return [s for s in self.samples if s[1] == via and t_from <= s[0] < t_to]

    def stop(self):
        self.stop_ev.set()
        self.thread.join(10 * SLOW)


# --------------------------------------------------------------------------------------
# the timeline

def running(f, t):
    return f["t0"] <= t and (f["t1"] is None or f["t1"] > t)


def in_flight_at_arrivals(events, t_from, t_to, via=None):
    """For each event of the upstream's timeline arriving in [t_from, t_to) (through via,
    or any proxy): (its arrival, its event, how many events of its user (through via, or
    any proxy) were in flight then, itself included)."""
    mine = sorted((e for e in events if via is None or e["via"] == via), key=lambda e: e["t0"])
    starts = [e["t0"] for e in mine]
    open_ended = [e for e in mine if e["t1"] is None]
    longest = max([e["t1"] - e["t0"] for e in mine if e["t1"] is not None] or [0.0])
    out = []
    for i in range(bisect.bisect_left(starts, t_from), bisect.bisect_left(starts, t_to)):
        e = mine[i]
        # only events that began at most `longest` earlier can still run, or never ended
        lo = bisect.bisect_left(starts, e["t0"] - longest)
        n = 1 + sum(1 for f in mine[lo:i] if f["user"] == e["user"] and running(f, e["t0"]))
        n += sum(1 for f in open_ended if f["user"] == e["user"] and f["t0"] < starts[lo])
        out.append((e["t0"], e, n))
    return out


def in_flight_at(events, t, via=None):
    """How many events (through via, or any proxy) were in flight at t."""
    return sum(1 for f in events if (via is None or f["via"] == via) and running(f, t))
