#!/usr/bin/env python3
"""etc/bench/check_cost.py - what one check.lua call costs redis-server, in instructions.

Starts redis-server under valgrind's callgrind (instrumentation off), loads store/redis/check.lua
(with check_general.lua, as the proxy does),
makes warm-up calls, then counts the instructions redis-server executes (reading the
command, the script, every command inside it, the reply) over N calls of one rule set,
and prints instructions per call. Deterministic to about 1 %, so an A/B of two scripts or
two rule sets needs no quiet machine (etc/bench.sh's Redis CPU per request does).

The calls are the proxy's: EVALSHA with the keys "<prefix>{u:<n>}:<rule id>" of 300
subjects in turn, the server's clock, and the rules packed as store/redis/limiter_redis.c packs
them (put_rules), a quota's period included. Rule sets (every rule admits every call):
  sl              sliding log 3000/min (the default plan's rule)
  sl_cost2        the same, each call costing 2
  sl+quota        the log and a quota of 10^9 a month
  sl+quota_cost2  both, each call costing 2
  sl+conc         the log and a concurrency rule of 10^6 slots (each call takes a lease,
                  none is given back: ZADD to a set that grows)
  sl+conc_released  sl+conc, each lease given back (ZREM, counted) right after its check,
                  as a proxy does when the request ends: the set empties, Redis deletes it,
                  and the next check makes it again (a user without overlapping requests)
  sl+conc+quota   the log, that concurrency rule and the quota
  sl+sl           the log and a second one, 100000/hour (a burst and a sustained rate)

  etc/bench/check_cost.py [--script FILE]... [--calls 2000] [SET ...]
"""
import argparse
import calendar
import datetime
import os
import socket
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SLIDING_LOG, CONCURRENCY, QUOTA, MONTH = 0, 4, 5, 3
RULE_SETS = {
    "sl": [(SLIDING_LOG, 3000, 0, 60000, 1)],
    "sl_cost2": [(SLIDING_LOG, 3000, 0, 60000, 2)],
    "sl+quota": [(SLIDING_LOG, 3000, 0, 60000, 1), (QUOTA, 10**9, 0, MONTH, 1)],
    "sl+quota_cost2": [(SLIDING_LOG, 3000, 0, 60000, 2), (QUOTA, 10**9, 0, MONTH, 2)],
    "sl+conc": [(SLIDING_LOG, 3000, 0, 60000, 1), (CONCURRENCY, 10**6, 0, 30000, 1)],
    "sl+conc_released": [(SLIDING_LOG, 3000, 0, 60000, 1), (CONCURRENCY, 10**6, 0, 30000, 1)],
    "sl+conc+quota": [(SLIDING_LOG, 3000, 0, 60000, 1), (CONCURRENCY, 10**6, 0, 30000, 1),
                      (QUOTA, 10**9, 0, MONTH, 1)],
    "sl+sl": [(SLIDING_LOG, 3000, 0, 60000, 1), (SLIDING_LOG, 100000, 0, 3600000, 1)],
}
SUBJECTS = 300
RELEASED = {"sl+conc_released"}   # sets whose leases are given back after each check


def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.f = self.sock.makefile("rb")

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("redis-server closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.f.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.read() for _ in range(n)]
        raise RuntimeError("unexpected reply %r" % line)

    def pipeline(self, commands):
        self.sock.sendall(b"".join(resp(*c) for c in commands))
        return [self.read() for _ in commands]


def month_period(now_ms):
    d = datetime.datetime.fromtimestamp(now_ms / 1000, datetime.timezone.utc).date()
    start = datetime.date(d.year, d.month, 1)
    end = datetime.date(d.year + 1, 1, 1) if d.month == 12 else datetime.date(d.year, d.month + 1, 1)
    return calendar.timegm(start.timetuple()) * 1000, calendar.timegm(end.timetuple()) * 1000


def packed_rules(rules, now_ms):
    """As put_rules in store/redis/limiter_redis.c: a kind byte, then six 7-byte big-endian fields."""
    out = b""
    for kind, rate, burst, window, cost in rules:
        period = month_period(now_ms) if kind == QUOTA else (0, 0)
        fields = (rate, burst, window, cost) + period
        out += bytes([kind]) + b"".join(struct.pack(">Q", v)[1:] for v in fields)
    return out


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def instructions_per_call(script, rules, calls, release=False):
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out,
             "redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(200):
                try:
                    conn = Conn(port)
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                raise RuntimeError("redis-server under valgrind did not start")
            sha = conn.pipeline([["SCRIPT", "LOAD", script]])[0]
            n = 0
            conc = next((i for i, r in enumerate(rules) if r[0] == CONCURRENCY), None)

            def run(count):
                nonlocal n
                while count > 0:
                    batch = []
                    for _ in range(min(count, 500)):
                        subject = "u:%d" % (n % SUBJECTS)
                        n += 1
                        keys = ["bench:{%s}:%d" % (subject, i + 1) for i in range(len(rules))]
                        spec = packed_rules(rules, int(time.time() * 1000))
                        lease = ["lease-%d" % n] if conc is not None else []
                        batch.append(["EVALSHA", sha, len(keys)] + keys + [-1, spec] + lease)
                        if release:
                            batch.append(["ZREM", keys[conc]] + lease)
                    for cmd, reply in zip(batch, conn.pipeline(batch)):
                        if cmd[0] == "ZREM":
                            if reply != 1:
                                raise RuntimeError("a lease not given back: %r" % (reply,))
                        elif not isinstance(reply, bytes) or len(reply) != 8 + 22 * len(rules) or reply[7] != 1:
                            raise RuntimeError("unexpected answer %r" % (reply,))
                    count -= len(batch) // (2 if release else 1)

            run(1500)   # every subject's log exists and has its tail
            subprocess.run(["callgrind_control", "-i", "on", str(server.pid)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            run(calls)
            subprocess.run(["callgrind_control", "-i", "off", str(server.pid)], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        finally:
            server.terminate()
            server.wait()
        total = 0
        for name in os.listdir(tmp):
            with open(os.path.join(tmp, name)) as f:
                for line in f:
                    if line.startswith("totals:") or line.startswith("summary:"):
                        total = max(total, int(line.split()[1]))
        return total / calls


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--script", action="append",
                    help="the script's files, joined in order (default store/redis/check.lua, store/redis/check_general.lua)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("sets", nargs="*", default=list(RULE_SETS))
    args = ap.parse_args()
    script = b""
    for path in args.script or [os.path.join(ROOT, "store", n) for n in ("check.lua", "check_general.lua")]:
        with open(path, "rb") as f:
            script += f.read()
    for name in args.sets:
        if name not in RULE_SETS:
            sys.exit("check_cost.py: unknown rule set %r (known: %s)" % (name, ", ".join(RULE_SETS)))
        print("%-16s %8.0f instructions per call" % (name, instructions_per_call(script, RULE_SETS[name], args.calls,
                                                                                 name in RELEASED)),
              flush=True)


if __name__ == "__main__":
    main()
