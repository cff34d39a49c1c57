#!/usr/bin/env python3
"""etc/bench/proxy_cost.py - where a forwarded request's CPU goes in the proxy, in instructions.

Runs each variant under valgrind's callgrind (instrumentation off), one worker, in front of
etc/bench/upstream.c; drives it with `wrk -t1 -c8` and the bench's rotating keys (a warm-up,
then a measured run with instrumentation on), and prints user-space instructions per
forwarded request by library, then the functions whose cost per request differs most from
floor_proxy_opt's (etc/bench/floor: libmicrohttpd + libcurl and nothing else). Deterministic
to a few per cent, so it needs no quiet machine; etc/bench.sh measures time.

Variants:
  floor     floor_proxy_opt
  exempt    tierproxy with every path exempt (`exempt_paths = /`): no key, no limit, no
            RateLimit headers; what forwarding alone costs in tierproxy
  memory    tierproxy, memory store, the bench's plan (sliding log 1000000000/s)
  redis     the same with the redis store (a redis-server started here)
  rediss    the same over TLS (rediss://, a CA and a certificate made here with openssl)

Instructions are not time: libmicrohttpd zeroes its connection pool after every request
with `rep stosb`, which callgrind counts byte by byte (about 49k of the floor's and 55k of
tierproxy's instructions per request, for a 32 and a 36 KiB pool) and which costs far less
time than that many instructions; it is listed on its own.

  etc/bench/proxy_cost.py [--build build] [--seconds 10] [--top 25] [--plan-flags FLAGS] [VARIANT ...]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "etc", "bench")
VARIANTS = ("floor", "exempt", "memory", "redis", "rediss")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=60):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it listened")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"{what} did not listen on {port} within {timeout} s")


def wrk(port, keyfile, seconds):
    out = subprocess.run(["wrk", "-t1", "-c8", f"-d{seconds}s", "-s", os.path.join(BENCH, "wrk-keys.lua"),
                          f"http://127.0.0.1:{port}/"], env={**os.environ, "WRK_KEYFILE": keyfile},
                         capture_output=True, text=True).stdout
    m = re.search(r"RESULT requests=(\d+).*err_status=(\d+)", out)
    if not m:
        sys.exit("wrk gave no RESULT line:\n" + out)
    return int(m.group(1)), int(m.group(2))


def annotate(path):
    """{function@object: instructions} from callgrind_annotate, and the total."""
    out = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True, text=True).stdout
    cost = {}
    for ln in out.splitlines():
        m = re.match(r"^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(\S+)\s+\[(.*)\]", ln)
        if m:
            key = m.group(2).split(":")[-1] + "@" + os.path.basename(m.group(3))
            cost[key] = cost.get(key, 0) + int(m.group(1).replace(",", ""))
    return cost


def tls_files(tmp):
    """A CA and a certificate for 127.0.0.1 (openssl); redis-server's TLS options."""
    def run(*args):
        subprocess.run(["openssl"] + list(args), check=True, capture_output=True, cwd=tmp)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=bench CA")
    run("req", *ec, "-keyout", "redis.key", "-out", "redis.csr", "-subj", "/CN=redis")
    with open(os.path.join(tmp, "san.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", "redis.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "redis.pem", "-days", "2", "-extfile", "san.ext")
    return ["--tls-cert-file", os.path.join(tmp, "redis.pem"), "--tls-key-file", os.path.join(tmp, "redis.key"),
            "--tls-ca-cert-file", os.path.join(tmp, "ca.pem"), "--tls-auth-clients", "no"]


def measure(name, argv, port, keyfile, seconds, tmp):
    out = os.path.join(tmp, f"callgrind.{name}.out")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                             f"--callgrind-out-file={out}"] + argv,
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(tmp, f"{name}.err"), "w"),
                            start_new_session=True)
    try:
        wait_port(port, proc, name)
        wrk(port, keyfile, 3)
        subprocess.run(["callgrind_control", "-i", "on", str(proc.pid)], check=True, capture_output=True)
        n, bad = wrk(port, keyfile, seconds)
        subprocess.run(["callgrind_control", "-i", "off", str(proc.pid)], check=True, capture_output=True)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)
    if bad:
        sys.exit(f"{name}: {bad} of {n} answers were not 2xx")
    return {k: v / n for k, v in annotate(out).items()}, n


def by_object(cost):
    objs = {}
    for k, v in cost.items():
        obj = k.rsplit("@", 1)[1]
        if k.startswith("__memset"):
            obj += " (memset)"
        objs[obj] = objs.get(obj, 0) + v
    return objs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--plan-flags", default="",
                    help="more tierctl limit flags for the bench's plan, e.g. \"--concurrency 100000\"")
    ap.add_argument("variants", nargs="*", default=list(VARIANTS))
    a = ap.parse_args()
    for v in a.variants:
        if v not in VARIANTS:
            sys.exit(f"unknown variant {v}: one of {', '.join(VARIANTS)}")
    for tool in ("valgrind", "callgrind_control", "callgrind_annotate", "wrk", "cc", "redis-server"):
        if shutil.which(tool) is None:
            sys.exit(f"needs {tool} on PATH")
    build = os.path.abspath(a.build)
    proxy, ctl = os.path.join(build, "proxy", "tierproxy"), os.path.join(build, "tiers", "tierctl")
    floor = os.path.join(build, "floor", "floor_proxy_opt")
    if "floor" in a.variants and not os.access(floor, os.X_OK):
        subprocess.run([os.path.join(BENCH, "floor", "build.sh"), os.path.dirname(floor)], check=True,
                       stdout=subprocess.DEVNULL)

    tmp = tempfile.mkdtemp(prefix="proxy_cost.")
    procs = []
    try:
        up_bin, up_port = os.path.join(tmp, "upstream"), free_port()
        subprocess.run(["cc", "-O2", "-o", up_bin, os.path.join(BENCH, "upstream.c")], check=True)
        up = subprocess.Popen([up_bin, str(up_port), '{"ok":true,"service":"bench-upstream"}'],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        procs.append(up)
        wait_port(up_port, up, "the upstream")
        redis_port, tls_port = free_port(), free_port()
        if "redis" in a.variants or "rediss" in a.variants:
            tls_args = tls_files(tmp) if "rediss" in a.variants else []
            rd = subprocess.Popen(["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no"] + (["--tls-port", str(tls_port)] + tls_args if tls_args else []),
                                  stdout=subprocess.DEVNULL, start_new_session=True)
            procs.append(rd)
            wait_port(redis_port, rd, "redis-server")
        db, keyfile = os.path.join(tmp, "plans.db"), os.path.join(tmp, "keys.txt")
        subprocess.run([ctl, "--db", db, "init"], check=True, capture_output=True)
        subprocess.run([ctl, "--db", db, "plan", "add", "bench", "--rate", "1000000000/s", "--algorithm",
                        "sliding-log"] + a.plan_flags.split(), check=True, capture_output=True)
        with open(keyfile, "w") as f:
            for i in range(1, 101):
                subprocess.run([ctl, "--db", db, "user", "add", f"bench-{i}", "--plan", "bench"], check=True,
                               capture_output=True)
                key = subprocess.run([ctl, "--db", db, "key", "create", f"bench-{i}"], check=True,
                                     capture_output=True, text=True).stdout.strip().splitlines()[-1]
                f.write(key + "\n")

        results = {}
        for v in a.variants:
            port = free_port()
            if v == "floor":
                argv = [floor, str(port), str(up_port)]
            else:
                ini = os.path.join(tmp, f"{v}.ini")
                with open(ini, "w") as f:
                    f.write(f"[proxy]\nlisten = 127.0.0.1:{port}\nupstream = http://127.0.0.1:{up_port}\nworkers = 1\n"
                            + ("exempt_paths = /\n" if v == "exempt" else "")
                            + f"[admin]\nlisten =\n[plans]\ndb = {db}\n[log]\naccess = off\n"
                            + f"[limits]\nstore = {'redis' if v.startswith('redis') else 'memory'}\n"
                            + (f"redis = rediss://127.0.0.1:{tls_port}/0\nredis_ca_file = {tmp}/ca.pem\n"
                               if v == "rediss" else f"redis = redis://127.0.0.1:{redis_port}/0\n"))
                argv = [proxy, "-c", ini]
            print(f"measuring {v} ...", file=sys.stderr)
            results[v] = measure(v, argv, port, keyfile, a.seconds, tmp)
    finally:
        for p in procs:
            os.killpg(p.pid, signal.SIGTERM)
            p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)

    names = list(results)
    print(f"# Instructions per forwarded request (callgrind, wrk -t1 -c8 -d{a.seconds}s, one worker)\n")
    print("| | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    print("| requests measured | " + " | ".join(f"{results[n][1]:,}" for n in names) + " |")
    print("| instructions per request | " + " | ".join(f"{sum(results[n][0].values()) / 1000:.1f}k"
                                                   for n in names) + " |")
    objs = {n: by_object(results[n][0]) for n in names}
    for obj in sorted({o for n in names for o in objs[n]}, key=lambda o: -max(objs[n].get(o, 0) for n in names)):
        if max(objs[n].get(obj, 0) for n in names) >= 100:
            print(f"| {obj} | " + " | ".join(f"{objs[n].get(obj, 0) / 1000:.1f}k" for n in names) + " |")
    if "floor" in results:
        base = results["floor"][0]
        for n in names:
            if n == "floor":
                continue
            cost = results[n][0]
            diff = sorted(((cost.get(k, 0) - base.get(k, 0), k) for k in set(cost) | set(base)), reverse=True)
            print(f"\n## {n} against floor: the {a.top} functions that cost it most more per request (self)\n")
            print(f"| function | {n} | floor | difference |")
            print("|---|---:|---:|---:|")
            for d, k in diff[:a.top]:
                print(f"| {k} | {cost.get(k, 0):.0f} | {base.get(k, 0):.0f} | {d:+.0f} |")


if __name__ == "__main__":
    main()
