#!/usr/bin/env python3
"""etc/bench/catalog_follow.py - a large catalog from `tierctl` to two following proxies, and what
requests see meanwhile.

Starts a redis-server, etc/bench/upstream.c and two tierproxy processes (one worker each, store
= redis, [plans] follow = redis, each with its own db file) on free loopback ports; generates a
catalog of --users users and --keys API keys (the keys' text kept, the hashes imported) and
`tierctl import`s it with follow = redis, which publishes it. Then, in one run:

 1. publication to service: `tierctl key create` (follow = redis: it publishes a new version
    of the whole catalog) --repeats times with no load; the time from the command's start to
    the moment each proxy answers the new key 200 (each polled every few ms), split into the
    command itself, the wait for the proxy's poll and fetch, the install (the proxy's own
    "installed in ... ms" line, and when it appeared) and the snapshot rebuild; beside it what
    does not depend on waiting: the image's bytes, Redis's bytes out, the CPU of the
    proxy's catalog thread (/proc/PID/task/TID/schedstat) and of tierctl, Redis's slowest
    commands (SLOWLOG).
 2. request latency: wrk against each proxy (keys of the big catalog) in windows of equal
    length, alternately without and with a publication started --lead seconds in;
    p50/p99 of each window and, per pair of windows, p99 with / p99 without. In a window each
    proxy is asked for the new key every --window-poll-ms (100 ms), not every few ms as in part
    1: that polling (a request per proxy and a read of its log each time) would itself load only
    the windows with a publication. The moderate
    load is paced (wrk's delay(): --conns connections, each waiting --delay-ms between
    answer and next request: by default about 2,000 req/s per proxy, a quarter of its core,
    so the box keeps headroom as a production proxy's does and the publication's own work
    has a core to run on); then --saturated-pairs pairs at -c64 without pacing, as
    etc/bench.sh drives a proxy, for comparison.

Everything a run measures, with the proxies' stderr and wrk's outputs, lands in
build/bench-results/catalog_follow-TIME/; the report is printed (Markdown) and saved there.

  etc/bench/catalog_follow.py [--build build] [--users 100000] [--keys 150000] [--repeats 5]
      [--refresh-ms 1000] [--window 10] [--pairs 4] [--conns 16] [--delay-ms 5] [--saturated-pairs 1]
      [--store redis|memory] [--perf]

--local makes the key without --config and publishes it with `tierctl publish`, which reads the
fleet's catalog once and sends the rows in which the file differs from it. --whole does the same
with `tierctl publish --force`, which sends the whole catalog: what --force and every 65th change
send.
--store memory keeps the catalog's path through Redis but checks limits in the proxies: what a
publication costs requests apart from Redis being busy with it. --perf adds one publication under
`perf record --call-graph dwarf` (proxy A's catalog thread, redis-server): perf-*.txt beside the
report. The box's other load is measured and shown per window ("other %"): a shared box's
neighbours move absolute figures; the with/without ratios compare windows run back to back.
"""
import argparse
import datetime
import hashlib
import http.client
import json
import os
import random
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from catalog_follow_report import report

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "etc", "bench")
TICK = os.sysconf("SC_CLK_TCK")
# a whole image installed, or the changed rows applied
INSTALLED = re.compile(r"catalog: version (\d+) from .* (?:installed in|applied to) .* \((\d+) bytes, (\d+) ms\)")
PUBLISHED = re.compile(r"published to .* as version (\d+) \((?:the )?(\d+) bytes")
RESULT = re.compile(r"RESULT (.*)")
SATURATED_CONNS = 64


def now():
    return time.monotonic()


# ------------------------------------------------------------------------------ processes


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=60):
    t0 = now()
    while now() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port} within {timeout} s")


def spawn(argv, err_path, env=None):
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(err_path, "w"), env=env,
                            start_new_session=True)


def reap(proc):
    """Waits for a child; returns (exit code, CPU seconds of its rusage)."""
    _, status, ru = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru.ru_utime + ru.ru_stime


def run_timed(argv):
    """Runs a command; returns (exit code, stdout, stderr, wall s, CPU s)."""
    t0 = now()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.stdout.read(), proc.stderr.read()
    rc, cpu = reap(proc)
    return rc, out, err, now() - t0, cpu


def stop(proc):
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)


def proc_cpu(pid):
    """utime + stime of a whole process (its dead threads included), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def task_cpu(pid):
    """{tid: seconds on a CPU} of each live thread, from schedstat (ns)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                out[int(tid)] = int(f.read().split()[0]) / 1e9
        except OSError:
            pass
    return out


def catalog_thread(pid):
    """The proxy's catalog thread: between polls the one thread waiting on a futex (a timed
    condition wait); the workers and the admin wait in epoll, the main thread in sigtimedwait.
    None when that is not seen."""
    for _ in range(50):
        waiting = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/wchan") as f:
                    if "futex" in f.read():
                        waiting.append(int(tid))
            except OSError:
                pass
        if len(waiting) == 1:
            return waiting[0]
        time.sleep(0.02)
    return None


def status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def box_cpu():
    """(busy, steal) seconds of the whole box, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq) / TICK, steal / TICK


# ------------------------------------------------------------------------------ redis


def resp_read(f):
    line = f.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2].decode(errors="replace")
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [resp_read(f) for _ in range(n)]
    raise RuntimeError(f"not a RESP answer: {line[:80]!r}")


def redis_cmd(port, *args):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"*{len(args)}\r\n".encode() + b"".join(f"${len(a)}\r\n{a}\r\n".encode() for a in args))
        return resp_read(s.makefile("rb"))


def redis_info(port):
    info = {}
    for line in redis_cmd(port, "INFO", "stats", "cpu", "commandstats").splitlines():
        k, _, v = line.partition(":")
        if k.startswith("cmdstat_"):
            info[k] = {a: float(b) for a, b in (kv.split("=") for kv in v.split(",") if "=" in kv)}
        elif v:
            info[k] = v
    return info


def slowlog(port):
    """Commands Redis spent >= 1 ms on since the last call: [(command, µs, client name)]."""
    out = []
    for entry in redis_cmd(port, "SLOWLOG", "GET", "1000"):
        out.append((entry[3][0].upper(), int(entry[2]), entry[5] if len(entry) > 5 else ""))
    redis_cmd(port, "SLOWLOG", "RESET")
    return out


# ------------------------------------------------------------------------------ the catalog


def make_catalog(ctl, tmp, n_users, n_keys, n_wrk_keys):
    """Writes catalog.json (the plans of `tierctl init`, n_users users over them in turn,
    n_keys keys) and the keys' text. Returns (json path, wrk key file, a pro user)."""
    scratch = os.path.join(tmp, "scratch.db")
    subprocess.run([ctl, "--db", scratch, "init"], check=True, capture_output=True)
    doc = json.loads(subprocess.run([ctl, "--db", scratch, "export"], check=True, capture_output=True,
                                    text=True).stdout)
    plans = [p["name"] for p in doc["plans"]]
    if "pro" not in plans:
        sys.exit(f"`tierctl init` made no plan pro (it made {plans})")
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    users = [{"id": f"u{i:06d}", "plan": plans[i % len(plans)], "created": created, "limits": []}
             for i in range(n_users)]
    keys, pro_keys = [], []
    for j in range(n_keys):
        user = users[j % n_users]
        text = "tp_" + os.urandom(24).hex()
        keys.append({"id": j + 1, "user": user["id"], "label": "", "created": created, "revoked": None,
                     "sha256": hashlib.sha256(text.encode()).hexdigest()})
        if user["plan"] == "pro":
            pro_keys.append(text)
    doc.update(users=users, api_keys=keys)
    doc["last_ids"]["api_keys"] = n_keys
    path, keyfile = os.path.join(tmp, "catalog.json"), os.path.join(tmp, "wrk-keys.txt")
    with open(path, "w") as f:
        json.dump(doc, f)
    with open(keyfile, "w") as f:
        f.write("\n".join(random.Random(1).sample(pro_keys, min(n_wrk_keys, len(pro_keys)))) + "\n")
    return path, keyfile, next(u["id"] for u in users if u["plan"] == "pro")


# ------------------------------------------------------------------------------ a proxy


class Proxy:
    def __init__(self, name, binary, tmp, results, up_port, redis_port, refresh_ms, store):
        self.name, self.port, self.admin = name, free_port(), free_port()
        self.err_path = os.path.join(results, f"proxy-{name}.err")
        ini = os.path.join(tmp, f"proxy-{name}.ini")
        with open(ini, "w") as f:
            f.write(f"[proxy]\nlisten = 127.0.0.1:{self.port}\nupstream = http://127.0.0.1:{up_port}\nworkers = 1\n"
                    f"[admin]\nlisten = 127.0.0.1:{self.admin}\n"
                    f"[plans]\ndb = {os.path.join(tmp, f'proxy-{name}.db')}\nfollow = redis\n"
                    f"refresh_ms = {refresh_ms}\n[log]\naccess = off\n"
                    f"[limits]\nstore = {store}\nredis = redis://127.0.0.1:{redis_port}/0\n")
        self.proc = spawn([binary, "-c", ini], self.err_path)
        self.pid = self.proc.pid
        self.conn = None
        self.catalog_thread = None

    def status(self, key):
        """The answer's status to GET / with key (0: no answer), on a kept-alive connection."""
        for _ in range(2):
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                self.conn.request("GET", "/", headers={"Authorization": "Bearer " + key})
                resp = self.conn.getresponse()
                resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return resp.status
            except (OSError, http.client.HTTPException):
                if self.conn:
                    self.conn.close()
                self.conn = None
        return 0

    def health(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", self.admin, timeout=5)
            c.request("GET", "/health")
            return json.loads(c.getresponse().read())
        except (OSError, ValueError, http.client.HTTPException):
            return {}

    def log(self):
        with open(self.err_path, errors="replace") as f:
            return f.read()

    def installs(self):
        """{version: (bytes, ms)} from the proxy's "installed in" and "applied to" lines."""
        return {int(m[1]): (int(m[2]), int(m[3])) for m in INSTALLED.finditer(self.log())}

    def close(self):
        if self.conn:
            self.conn.close()
        stop(self.proc)


# ------------------------------------------------------------------------------ measuring


class Bench:
    def __init__(self, a, tmp, results):
        self.a, self.tmp, self.results = a, tmp, results
        build = os.path.abspath(a.build)
        self.proxy_bin = os.path.join(build, "proxy", "tierproxy")
        self.ctl = os.path.join(build, "tiers", "tierctl")
        self.procs, self.proxies = [], []

    def ctl_args(self, *args):
        nice = ["nice", "-n", str(self.a.admin_nice)] if self.a.admin_nice else []
        return nice + [self.ctl, "--db", self.admin_db, "--config", self.admin_ini] + list(args)

    # ---- set-up

    def start_services(self):
        up_bin, self.up_port = os.path.join(self.tmp, "upstream"), free_port()
        subprocess.run(["cc", "-O2", "-o", up_bin, os.path.join(BENCH, "upstream.c")], check=True)
        self.upstream = spawn([up_bin, str(self.up_port), '{"ok":true,"service":"bench-upstream"}'],
                              os.path.join(self.results, "upstream.err"))
        self.procs.append(self.upstream)
        wait_port(self.up_port, self.upstream, "the upstream")
        self.redis_port = free_port()
        self.redis = spawn(["redis-server", "--port", str(self.redis_port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--slowlog-log-slower-than", "1000", "--slowlog-max-len", "1000"],
                           os.path.join(self.results, "redis.err"))
        self.procs.append(self.redis)
        wait_port(self.redis_port, self.redis, "redis-server")
        self.admin_db, self.admin_ini = os.path.join(self.tmp, "admin.db"), os.path.join(self.tmp, "admin.ini")
        with open(self.admin_ini, "w") as f:
            f.write(f"[plans]\nfollow = redis\n[limits]\nredis = redis://127.0.0.1:{self.redis_port}/0\n")

    def load_catalog(self):
        a = self.a
        t0 = now()
        path, self.keyfile, self.pro_user = make_catalog(self.ctl, self.tmp, a.users, a.keys, a.wrk_keys)
        gen = now() - t0
        rc, out, err, wall, cpu = run_timed(self.ctl_args("import", path))
        m = PUBLISHED.search(err)
        if rc != 0 or not m:
            sys.exit(f"tierctl import (follow = redis) failed or did not publish:\n{out}{err}")
        self.first = {"generate_s": gen, "json_bytes": os.path.getsize(path), "import_wall_s": wall,
                      "import_cpu_s": cpu, "version": int(m[1]), "image_bytes": int(m[2])}
        print(f"catalog: {a.users} users, {a.keys} keys; import + publish {wall:.1f} s, image {int(m[2]):,} bytes",
              file=sys.stderr)

    def start_proxies(self):
        t0 = now()
        for name in ("A", "B"):
            p = Proxy(name, self.proxy_bin, self.tmp, self.results, self.up_port, self.redis_port, self.a.refresh_ms,
                      self.a.store)
            self.proxies.append(p)
            self.procs.append(p.proc)
        with open(self.keyfile) as f:
            key = f.readline().strip()
        for p in self.proxies:
            wait_port(p.port, p.proc, f"proxy {p.name}")
            while p.status(key) != 200:
                if p.proc.poll() is not None or now() - t0 > 120:
                    sys.exit(f"proxy {p.name} never served the catalog:\n{p.log()[-3000:]}")
                time.sleep(0.05)
        self.first["proxies_start_s"] = now() - t0
        for p in self.proxies:
            p.catalog_thread = catalog_thread(p.pid)

    # ---- snapshots of every counter

    def snapshot(self):
        busy, steal = box_cpu()
        return {"t": now(), "busy": busy, "steal": steal, "self": resource.getrusage(resource.RUSAGE_SELF),
                "proxy": {p.name: proc_cpu(p.pid) for p in self.proxies},
                "tasks": {p.name: task_cpu(p.pid) for p in self.proxies},
                "redis_cpu": proc_cpu(self.redis.pid), "up_cpu": proc_cpu(self.upstream.pid),
                "info": redis_info(self.redis_port)}

    @staticmethod
    def delta(b, a, children_cpu=0.0):
        """CPU and byte counts between two snapshots."""
        wall = a["t"] - b["t"]
        own = (a["self"].ru_utime + a["self"].ru_stime) - (b["self"].ru_utime + b["self"].ru_stime)
        d = {"wall": wall, "proxy": {n: a["proxy"][n] - b["proxy"][n] for n in a["proxy"]},
             "tasks": {n: {t: a["tasks"][n][t] - b["tasks"][n].get(t, 0.0) for t in a["tasks"][n]} for n in a["tasks"]},
             "redis_cpu": a["redis_cpu"] - b["redis_cpu"], "up_cpu": a["up_cpu"] - b["up_cpu"],
             "redis_out": int(a["info"]["total_net_output_bytes"]) - int(b["info"]["total_net_output_bytes"]),
             "redis_in": int(a["info"]["total_net_input_bytes"]) - int(b["info"]["total_net_input_bytes"]),
             "busy_pct": 100 * (a["busy"] - b["busy"]) / wall, "steal_pct": 100 * (a["steal"] - b["steal"]) / wall}
        ours = sum(d["proxy"].values()) + d["redis_cpu"] + d["up_cpu"] + own + children_cpu
        d["other_pct"] = max(0.0, d["busy_pct"] - 100 * ours / wall)
        return d

    # ---- one publication

    def publish(self, deadline_s=30, poll_ms=None):
        """`tierctl key create` (which publishes) and the wait until both proxies serve the key,
        each asked every poll_ms (default --poll-ms)."""
        t0 = now()
        if self.a.whole or self.a.local:   # the key made locally, then `tierctl publish`
            rc, out, _, wall0, cpu0 = run_timed([self.ctl, "--db", self.admin_db, "key", "create", self.pro_user])
            rc, _, err, wall, cpu = run_timed(self.ctl_args("publish", *(["--force"] if self.a.whole else [])))
            wall, cpu = wall + wall0, cpu + cpu0
        else:
            rc, out, err, wall, cpu = run_timed(self.ctl_args("key", "create", self.pro_user))
        m = PUBLISHED.search(err)
        if rc != 0 or not m:
            sys.exit(f"tierctl key create did not publish (exit {rc}):\n{err}")
        key, version = out.strip().splitlines()[-1], int(m[1])
        served, logged = {}, {}
        while len(served) < len(self.proxies) and now() - t0 < deadline_s:
            for p in self.proxies:
                if p.name not in logged and version in p.installs():
                    logged[p.name] = now() - t0
                if p.name not in served and p.status(key) == 200:
                    served[p.name] = now() - t0
            time.sleep((poll_ms or self.a.poll_ms) / 1000)
        pub = {"version": version, "image_bytes": int(m[2]), "ctl_wall": wall, "ctl_cpu": cpu, "served": served,
               "logged": logged, "installs": {}}
        for p in self.proxies:
            if p.name not in served:
                sys.exit(f"proxy {p.name} did not serve version {version} within {deadline_s} s:\n{p.log()[-3000:]}")
            pub["installs"][p.name] = p.installs().get(version)
        pub["last"] = max(served.values())
        return pub

    def publication_to_service(self):
        out = []
        time.sleep(self.a.refresh_ms / 1000 + 0.5)
        for i in range(self.a.repeats):
            slowlog(self.redis_port)
            b = self.snapshot()
            pub = self.publish()
            time.sleep(0.3)   # the old snapshot's release, after the swap
            d = self.delta(b, self.snapshot(), pub["ctl_cpu"])
            pub["delta"], pub["slow"] = d, slowlog(self.redis_port)
            for p in self.proxies:
                tasks = d["tasks"][p.name]
                p.catalog_thread = p.catalog_thread or max(tasks, key=tasks.get)
                pub.setdefault("thread", {})[p.name] = tasks.get(p.catalog_thread, 0.0)
            out.append(pub)
            print(f"publication {i + 1}/{self.a.repeats}: version {pub['version']}, last proxy served "
                  f"{pub['last']:.2f} s after the command's start", file=sys.stderr)
            time.sleep(1.0)
        return out

    def profiled_publication(self):
        """One more publication, not counted, with perf recording proxy A and redis-server."""
        time.sleep(self.a.refresh_ms / 1000 + 0.5)
        a, recs = self.proxies[0], []
        for name, pid in (("proxyA", a.pid), ("redis", self.redis.pid)):
            data = os.path.join(self.results, f"perf-{name}.data")
            argv = ["perf", "record", "-F", "250", "--call-graph", "dwarf", "-p", str(pid), "-o", data]
            recs.append((name, data, subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        time.sleep(0.5)
        pub = self.publish()
        time.sleep(0.3)
        for name, data, proc in recs:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            tid = ["--tid", str(a.catalog_thread)] if name == "proxyA" and a.catalog_thread else []
            for view, flags in (("self", ["--no-children"]), ("children", ["--children"])):
                with open(os.path.join(self.results, f"perf-{name}-{view}.txt"), "w") as fo:
                    subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso,sym", "-g", "none",
                                    "--percent-limit", "0.5"] + flags + tid, stdout=fo, stderr=subprocess.DEVNULL)
        print(f"profiled publication: version {pub['version']}, last proxy served {pub['last']:.2f} s; "
              f"perf-*.txt in {self.results}", file=sys.stderr)
        return pub

    # ---- wrk windows

    def wrk_script(self):
        path = os.path.join(self.tmp, "paced.lua")
        with open(path, "w") as f:
            f.write(f'dofile("{os.path.join(BENCH, "wrk-keys.lua")}")\n'
                    'local pause = tonumber(os.getenv("WRK_DELAY_MS") or "0")\n'
                    'if pause > 0 then function delay() return pause end end\n')
        return path

    def window(self, label, conns, delay_ms, with_publication):
        env = {**os.environ, "WRK_KEYFILE": self.keyfile, "WRK_DELAY_MS": str(delay_ms)}
        slowlog(self.redis_port)
        b = self.snapshot()
        wrks = []
        for p in self.proxies:
            out_path = os.path.join(self.results, f"wrk-{label}-{p.name}.txt")
            wrks.append((p, out_path, subprocess.Popen(
                ["wrk", "-t1", f"-c{conns}", f"-d{self.a.window}s", "--timeout", "5s", "-s", self.script,
                 f"http://127.0.0.1:{p.port}/"], stdout=open(out_path, "w"), stderr=subprocess.STDOUT, env=env)))
        pub = None
        if with_publication:
            time.sleep(self.a.lead)
            t_pub = now() - b["t"]
            pub = self.publish(deadline_s=self.a.window + 20, poll_ms=self.a.window_poll_ms)
            pub["start"] = t_pub
        cpu, rows = 0.0, {}
        for p, out_path, proc in wrks:
            rc, c = reap(proc)
            cpu += c
            with open(out_path) as f:
                m = RESULT.search(f.read())
            if rc != 0 or not m:
                sys.exit(f"wrk against proxy {p.name} gave no RESULT line (exit {rc}): see {out_path}")
            rows[p.name] = {k: float(v) for k, v in (kv.split("=") for kv in m[1].split())}
        d = self.delta(b, self.snapshot(), cpu + (pub["ctl_cpu"] if pub else 0.0))
        return {"label": label, "conns": conns, "delay_ms": delay_ms, "pub": pub, "wrk": rows, "delta": d,
                "slow": slowlog(self.redis_port)}

    def windows(self, kind, pairs, conns, delay_ms):
        out = []
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            pair = {}
            for with_pub in order:
                label = f"{kind}{i + 1}-{'pub' if with_pub else 'quiet'}"
                pair["pub" if with_pub else "quiet"] = self.window(label, conns, delay_ms, with_pub)
                r = pair["pub" if with_pub else "quiet"]["wrk"]
                print(f"window {label}: p99 " + ", ".join(f"{n} {r[n]['lat_p99_us'] / 1000:.2f} ms" for n in r),
                      file=sys.stderr)
                time.sleep(1.0)
            out.append(pair)
        return out

    # ---- the run

    def run(self):
        self.start_services()
        self.load_catalog()
        self.start_proxies()
        self.script = self.wrk_script()
        self.pubs = self.publication_to_service()
        self.profiled = self.profiled_publication() if self.a.perf else None
        self.paced = self.windows("paced", self.a.pairs, self.a.conns, self.a.delay_ms)
        self.saturated = self.windows("saturated", self.a.saturated_pairs, SATURATED_CONNS, 0)
        self.rss = {p.name: (status_kib(p.pid, "VmRSS"), status_kib(p.pid, "VmHWM")) for p in self.proxies}

    def close(self):
        for p in self.proxies:
            p.close()
        for proc in self.procs:
            stop(proc)


# ------------------------------------------------------------------------------ the report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--users", type=int, default=100000)
    ap.add_argument("--keys", type=int, default=150000)
    ap.add_argument("--wrk-keys", type=int, default=10000, help="keys wrk rotates over (pro plan)")
    ap.add_argument("--repeats", type=int, default=5, help="publications timed without load")
    ap.add_argument("--refresh-ms", type=int, default=1000)
    ap.add_argument("--poll-ms", type=int, default=3, help="how often each proxy is asked for the new key")
    ap.add_argument("--local", action="store_true",
                    help="the key made without --config, then `tierctl publish`: the rows in which the file "
                         "differs from the fleet's catalog")
    ap.add_argument("--whole", action="store_true",
                    help="the key made without --config, then `tierctl publish --force`: the whole catalog "
                         "(what --force, every 65th change and a fleet that cannot be compared with send)")
    ap.add_argument("--window-poll-ms", type=int, default=100,
                    help="the same in a latency window: polling every few ms would load only the windows with a "
                         "publication")
    ap.add_argument("--window", type=int, default=10, help="seconds of each wrk window")
    ap.add_argument("--lead", type=float, default=0.5, help="seconds into a window the publication starts")
    ap.add_argument("--pairs", type=int, default=4, help="pairs of paced windows (without, with)")
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--delay-ms", type=int, default=5)
    ap.add_argument("--saturated-pairs", type=int, default=1)
    ap.add_argument("--store", choices=("redis", "memory"), default="redis",
                    help="the proxies' limiter store (the catalog comes through Redis either way)")
    ap.add_argument("--admin-nice", type=int, default=0,
                    help="run tierctl at this nice value: in a fleet the admin's command runs on "
                         "another host, here it shares the proxies' two cores")
    ap.add_argument("--perf", action="store_true",
                    help="one more publication under perf record --call-graph dwarf (proxy A, redis-server)")
    a = ap.parse_args()
    for tool in ("wrk", "cc", "redis-server") + (("perf",) if a.perf else ()):
        if shutil.which(tool) is None:
            sys.exit(f"needs {tool} on PATH")
    started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    results = os.path.join(ROOT, "build", "bench-results",
                           "catalog_follow-" + datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    os.makedirs(results, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="catalog_follow.")
    B = Bench(a, tmp, results)
    try:
        B.run()
    finally:
        B.close()
        shutil.rmtree(tmp, ignore_errors=True)
    text = report(B, started, "etc/bench/catalog_follow.py " + " ".join(sys.argv[1:]))
    with open(os.path.join(results, "report.md"), "w") as fo:
        fo.write(text + "\n")
    with open(os.path.join(results, "figures.json"), "w") as fo:
        json.dump({"first": B.first, "publications": B.pubs, "paced": B.paced, "saturated": B.saturated,
                   "rss_kib": B.rss}, fo, indent=1, default=str)
    print(text)


if __name__ == "__main__":
    main()
