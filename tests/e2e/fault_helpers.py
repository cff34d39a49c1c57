"""Helpers for the fault and hostile-input tests (test_faults.py, test_hostile.py,
test_shadow.py):

  UpstreamOnPort(tmpdir, port)     upstream.py on a fixed port, so it can be killed and
                                   started again where the proxy expects it
  start_with_nofile(proxies, catalog, nofile, **kw)
                                   a tierproxy started with RLIMIT_NOFILE = nofile (set in
                                   the child before exec); stopped and checked like any other
  run_wrk(url, key, seconds, ...)  wrk with a Lua script that counts statuses and checks
                                   bodies; returns a dict (see WRK_LUA)
  metric(p, name, **labels)        one sample from /metrics (0 when absent)
  rss_kb(pid), cpu_s(pid), fd_count(pid)
"""
import json
import os
import pathlib
import re
import resource
import socket
import subprocess

from conftest import Proxy, require_program, spawn_test_server


# --------------------------------------------------------------------------------------
# an upstream on a fixed port

class UpstreamOnPort:
    def __init__(self, tmpdir, port):
        self.tmpdir = pathlib.Path(tmpdir)
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        self.port = port
        self.url = "http://127.0.0.1:%d" % port
        self.proc = None
        self.start()

    def start(self):
        self.proc, bound = spawn_test_server("upstream.py", self.tmpdir / ("upstream-%d.err" % self.port),
                                             self.port)
        if bound != self.port:
            raise RuntimeError("upstream.py did not start on %d (got %d)" % (self.port, bound))

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        if self.proc.stdout:
            self.proc.stdout.close()

    def close(self):
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, 18)     # SIGCONT, in case a test froze it
            except OSError:
                pass
        self.kill()


# --------------------------------------------------------------------------------------
# a proxy with a low file-descriptor limit

class LimitedProxy(Proxy):
    """conftest.Proxy, but the child gets RLIMIT_NOFILE = nofile before exec."""

    def __init__(self, tmpdir, ini, nofile):
        import conftest
        import subprocess as sp
        real_popen = sp.Popen

        def popen(*a, **kw):
            def limit():
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
            kw["preexec_fn"] = limit
            return real_popen(*a, **kw)
        # Proxy.__init__ calls subprocess.Popen through conftest's module: give it the
        # limiting one for this one call only
        conftest.subprocess = _PopenShim(popen)
        try:
            super().__init__(tmpdir, ini)
        finally:
            conftest.subprocess = sp


class _PopenShim:
    def __init__(self, popen):
        self.Popen = popen

    def __getattr__(self, name):
        return getattr(subprocess, name)


def start_with_nofile(proxies, catalog, nofile, **kw):
    ini = proxies.config(catalog, **kw)
    p = LimitedProxy(proxies.tmpdir, ini, nofile)
    proxies.started.append(p)
    return p.wait_ready()


# --------------------------------------------------------------------------------------
# wrk

WRK_LUA = r"""
wrk.method = "GET"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("WRK_KEY")
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  s200 = 0; s502 = 0; s503 = 0; s504 = 0; s429 = 0; other = 0
  bad_body = 0; with_rl = 0; last_other = ""
end
local function header(headers, name)
  for k, v in pairs(headers) do
    if string.lower(k) == name then return v end
  end
  return nil
end
function response(status, headers, body)
  if status == 200 then
    s200 = s200 + 1
    if not string.find(body, '"path": "/wrk', 1, true) then bad_body = bad_body + 1 end
    if header(headers, "ratelimit") then with_rl = with_rl + 1 end
  elseif status == 503 then
    s503 = s503 + 1
    if not string.find(body, '"limiter_unavailable"', 1, true) then bad_body = bad_body + 1 end
  elseif status == 502 then
    s502 = s502 + 1
    if not string.find(body, '"upstream_unavailable"', 1, true) then bad_body = bad_body + 1 end
  elseif status == 504 then s504 = s504 + 1
  elseif status == 429 then s429 = s429 + 1
  else other = other + 1; last_other = tostring(status) end
end
function done(summary, latency, requests)
  local t = {s200 = 0, s502 = 0, s503 = 0, s504 = 0, s429 = 0, other = 0,
             bad_body = 0, with_rl = 0}
  for _, th in ipairs(threads) do
    for k, _ in pairs(t) do t[k] = t[k] + (th:get(k) or 0) end
  end
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests": %d, "connect": %d, "read": %d, "write": %d, "status": %d, ' ..
    '"timeout": %d, "latency_max_us": %d, "latency_p99_us": %d, "s200": %d, "s502": %d, ' ..
    '"s503": %d, "s504": %d, "s429": %d, "other": %d, "bad_body": %d, "with_rl": %d}\n',
    summary.requests, e.connect, e.read, e.write, e.status, e.timeout, latency.max,
    latency:percentile(99), t.s200, t.s502, t.s503, t.s504, t.s429, t.other, t.bad_body,
    t.with_rl))
end
"""


def start_wrk(tmpdir, url, key, seconds, conns=32, threads=1, timeout_s=2):
    script = pathlib.Path(tmpdir) / "faults.lua"
    script.write_text(WRK_LUA)
    cmd = [require_program("wrk", "wrk"), "-t%d" % threads, "-c%d" % conns, "-d%ds" % seconds,
           "--timeout", "%ds" % timeout_s, "-s", str(script), url]
    env = dict(os.environ, WRK_KEY=key)
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, stdin=subprocess.DEVNULL)


def finish_wrk(proc, seconds):
    out, err = proc.communicate(timeout=seconds + 20)
    m = re.search(r"^WRKJSON (\{.*\})$", out, re.M)
    assert m, "wrk printed no summary:\n%s\n%s" % (out, err)
    res = json.loads(m.group(1))
    res["text"] = out
    return res


# --------------------------------------------------------------------------------------
# process and metrics probes

def _proc_status(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith(field + ":"):
                return int(ln.split()[1])
    return 0


def rss_kb(pid):
    return _proc_status(pid, "VmRSS")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fd_count(pid):
    return len(os.listdir("/proc/%d/fd" % pid))


def metric(p, name, **labels):
    """The value of one sample of /metrics (0 when absent). Labels given must all match."""
    text = p.admin("/metrics").body.decode()
    total = 0.0
    found = False
    for ln in text.splitlines():
        if ln.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", ln)
        if not m or m.group(1) != name:
            continue
        have = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(have.get(k) == str(v) for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    return total if found else 0.0


def raw_socket(port, timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


