#!/usr/bin/env python3
"""etc/bench/thread_waits.py - what each thread of the benchmark's processes ran and waited.

Samples /proc/PID/task/TID/schedstat (time on a CPU, time runnable but waiting for one) of
every thread of tierproxy, redis-server, wrk, tierctl and upstream every 50 ms, then prints
a table per half second: "ran/waited" in ms for each thread that ran at least 50 ms.

    etc/bench/thread_waits.py SECONDS [NAMES...] > table.txt   # beside a benchmark run
"""
import os
import sys
import time
from collections import defaultdict

NAMES = sys.argv[2:] or ["tierproxy", "redis-server", "wrk", "tierctl", "upstream"]


def sample():
    rows = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            comm = open(f"/proc/{pid}/comm").read().strip()
            if comm not in NAMES:
                continue
            for tid in os.listdir(f"/proc/{pid}/task"):
                run, wait, _ = map(int, open(f"/proc/{pid}/task/{tid}/schedstat").read().split())
                rows[f"{comm}.{tid}"] = (run, wait)
        except OSError:
            pass
    return rows


def main():
    end, t0, prev = time.time() + float(sys.argv[1]), time.time(), {}
    bins = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    while time.time() < end:
        now, rows = time.time(), sample()
        for k, (run, wait) in rows.items():
            if k in prev:
                b = bins[int((now - t0) / 0.5)][k]
                b[0] += run - prev[k][0]
                b[1] += wait - prev[k][1]
        prev = rows
        time.sleep(0.05)
    ran = defaultdict(int)
    for b in bins.values():
        for k, v in b.items():
            ran[k] += v[0]
    threads = sorted(k for k in ran if ran[k] > 50e6)
    print("s     " + " ".join(f"{k[-14:]:>14}" for k in threads))
    for i in sorted(bins):
        print(f"{i * 0.5:5.1f} " + " ".join(
            f"{bins[i][k][0] // 10**6:>6}/{bins[i][k][1] // 10**6:<7}" for k in threads))


if __name__ == "__main__":
    main()
