"""Markdown report for etc/bench.sh.

usage: report.py RUNS META
  RUNS  one line per wrk run, key=value fields (cycle, run, target, conns, kept, dist, rps, ...)
  META  key=value lines: date, command, machine, tools, descriptions, server commands
Only runs kept by etc/bench.sh count; of those, runs still disturbed after all repeats are
left out of medians and ratios when the same run has undisturbed cycles.
"""
import statistics
import sys

TARGETS = {  # P1..P7 thresholds
    "P1": 0.85,   # tierproxy_redis req/s / nginx_proxy req/s, at least
    "P2": 1.0,    # tierproxy_memory req/s / nginx_proxy req/s, at least
    "P3": 1.0,    # tierproxy p99 / nginx_proxy p99, at most
    "P4": 8.0,    # Redis CPU µs per request, at most
    "P7_goodput": 0.90,  # goodput at P7_CONNS / goodput at CONNS, at least
    "P7_429": 0.5,       # proxy CPU per 429 / proxy CPU per forwarded request, at most
}

SPEED = {  # S1..S6 thresholds (issue 15, "Speed II"); ratios of rows of one interleaved run
    "S1_rps_vs_peer": 1.25,     # tierproxy_redis req/s / nginx_lua_redis req/s, at least
    "S1_cpu_vs_floor": 1.10,    # tierproxy_redis proxy CPU per request / floor_proxy_opt's, at most
    "S2_cpu_vs_floor": 1.05,    # tierproxy_memory proxy CPU per request / floor_proxy_opt's, at most
    "S2_rps_vs_floor": 0.95,    # tierproxy_memory req/s / floor_proxy_opt req/s, at least
    "S3_p99_vs_peer": 1.0,      # tierproxy_redis p99 / nginx_lua_redis p99, at most
    "S3_p99_vs_floor": 1.1,     # tierproxy_memory p99 / floor_proxy_opt p99, at most
    "S4_redis_us": 6.0,         # redis-server CPU µs per check (tierproxy_redis), at most
    "S5_goodput": 0.95,         # goodput at 2x the connections / goodput at CONNS, at least
    "S5_429": 0.35,             # proxy CPU per 429 / proxy CPU per forwarded request, at most (also
                                # issue 25's: a refusal kept alive, memory store, -cS5_CONNS, side by side)
    "S6_rss_bytes": 12 * 1024,  # proxy RSS per idle WebSocket tunnel at 9,900 tunnels, at most
}
PEER, FLOOR = "nginx_lua_redis", "floor_proxy_opt"


def num(v):
    try:
        return float(v)
    except ValueError:
        return v


def load(runs_path, meta_path):
    meta = {}
    with open(meta_path) as f:
        for line in f:
            k, _, v = line.rstrip("\n").partition("=")
            meta[k] = v
    runs = []
    with open(runs_path) as f:
        for line in f:
            if line.strip():
                runs.append({k: num(v) for k, v in (kv.split("=", 1) for kv in line.split())})
    clean = {r["run"] for r in runs if r["kept"] == 1 and r["dist"] == 0}
    for r in runs:
        r["use"] = r["kept"] == 1 and (r["dist"] == 0 or r["run"] not in clean)
        n = r["requests"] or 1
        r["goodput"] = r["rps"] * (r["requests"] - r["non2xx"]) / n
        r["non2xx_pct"] = 100.0 * r["non2xx"] / n
        r["evalsha_per_req"] = r["evalsha_calls"] / n
        r["eval_per_req"] = r["eval_calls"] / n
        r["redis_calls_per_req"] = r["redis_all_calls"] / n
        r["evalsha_us_per_call"] = r["evalsha_usec"] / r["evalsha_calls"] if r["evalsha_calls"] else 0.0
        r["sqlite_per_req"] = r["sqlite_stmts"] / n
    return meta, runs


class Runs:
    def __init__(self, runs):
        self.runs = runs

    def used(self, run):
        return [r for r in self.runs if r["run"] == run and r["use"]]

    def has(self, run):
        return bool(self.used(run))

    def med(self, run, key):
        v = [r[key] for r in self.used(run)]
        return statistics.median(v) if v else None

    def per_cycle(self, run, key):
        return {r["cycle"]: r[key] for r in self.used(run)}

    def ratio(self, run, ref, key="rps", ref_key=None):
        """median over cycles of run[key] / ref[ref_key], both from the same cycle"""
        a = self.per_cycle(run, key)
        b = self.per_cycle(ref, ref_key or key)
        v = [a[c] / b[c] for c in a if c in b and b[c] > 0]
        return statistics.median(v) if v else None


def f(x, fmt="{:.1f}", none="-"):
    return none if x is None else fmt.format(x)


def ms(us):
    return f(None if us is None else us / 1000.0, "{:.2f}")


def main():
    meta, all_runs = load(sys.argv[1], sys.argv[2])
    R = Runs(all_runs)
    active = meta.get("active", "").split()
    p7 = meta.get("p7_targets", "").split()
    conns, p7c = meta["conns"], meta["p7_conns"]
    out = []
    w = out.append

    w(f"# tierproxy benchmark ({meta['date']})")
    w("")
    w(f"Machine: {meta['machine']}. Everything on 127.0.0.1.")
    w("")
    w(f"Command: `{meta['command']}`")
    w("")
    w(f"Tools: {meta['tools']}.")
    w("")
    w(f"Load: {meta['load']}. Figures are medians over cycles; ratio columns are medians of "
      "per-cycle ratios (both rows measured in the same cycle).")
    w("")

    # ---------------------------------------------------------------- throughput
    w("## Throughput and latency")
    w("")
    w("| row | req/s | vs nginx_proxy | vs direct | p50 ms | p99 ms | p99 vs nginx_proxy | non-2xx % | req/s per cycle |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for row in active:
        per = " / ".join(f"{r['rps']:.0f}" for r in R.used(row))
        w(f"| {row} | {f(R.med(row, 'rps'), '{:.0f}')} | {f(R.ratio(row, 'nginx_proxy'), '{:.2f}')} "
          f"| {f(R.ratio(row, 'direct'), '{:.2f}')} | {ms(R.med(row, 'p50_us'))} | {ms(R.med(row, 'p99_us'))} "
          f"| {f(R.ratio(row, 'nginx_proxy', 'p99_us'), '{:.2f}')} | {f(R.med(row, 'non2xx_pct'))} | {per} |")
    for k, v in meta.items():
        if k.startswith("skip."):
            w(f"| {k[5:]} | skipped: {v} | | | | | | | |")
    w("")

    # ---------------------------------------------------------------- CPU
    w(f"## CPU per request (µs of CPU time ÷ requests answered; medians; the box has {int(meta['nproc']) * 100}% CPU)")
    w("")
    w("| run | proxy µs | upstream µs | redis-server µs | wrk µs | proxy % | upstream % | redis % | wrk % | other procs % | steal % | repeated / disturbed but kept |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    p7_floor = meta.get("p7_floor", "")
    s5t, s5c = meta.get("s5_target", ""), meta.get("s5_conns", "")
    s5_fwd, s5_429 = f"{s5t}@s5-fwd", f"{s5t}@s5-429"
    names = active + [f"{t}@c{p7c}" for t in p7] + ([f"{p7_floor}@c{p7c}"] if p7_floor else []) + \
        [f"{t}@429" for t in p7] + ([s5_fwd, s5_429] if s5t else [])
    for run in names:
        if not R.has(run):
            continue
        rep = sum(1 for r in all_runs if r["run"] == run and r["kept"] == 0)
        dk = sum(1 for r in all_runs if r["run"] == run and r["kept"] == 1 and r["dist"] == 1)
        proxy_us = "-" if run == "direct" else f(R.med(run, "us_proxy"))
        proxy_pct = "-" if run == "direct" else f(R.med(run, "cpu_proxy"))
        w(f"| {run} | {proxy_us} | {f(R.med(run, 'us_up'))} | {f(R.med(run, 'us_redis'))} | {f(R.med(run, 'us_wrk'))} "
          f"| {proxy_pct} | {f(R.med(run, 'cpu_up'))} | {f(R.med(run, 'cpu_redis'))} | {f(R.med(run, 'cpu_wrk'))} "
          f"| {f(R.med(run, 'cpu_other'))} | {f(R.med(run, 'steal'))} | {rep} / {dk} |")
    w("")
    w("Per process: utime+stime of its whole process group from /proc/PID/stat before and after the "
      "measured run; wrk: its own CPU (`times`). \"other procs\" = CPU of the box used by processes "
      f"not started by the benchmark; a run with other + steal above {meta['busy_pct']}% of a core is "
      f"disturbed and repeated (up to {meta['max_retry']} times); one still disturbed after that is kept "
      "but left out of medians when the same run has undisturbed cycles. The box is shared with "
      "whatever else runs on it: treat differences under ~10% between rows as noise.")
    w("")

    # ---------------------------------------------------------------- after / before
    pairs = [(t, t + "_baseline") for t in ("floor_proxy_opt", "tierproxy_memory", "tierproxy_redis")
             if R.has(t) and R.has(t + "_baseline")]
    if pairs:
        w("## This build against the baseline binaries (proxy CPU per request)")
        w("")
        w("| row | proxy µs/req after (min–max) | proxy µs/req before (min–max) | after/before | per-cycle ratios "
          "| verdict | req/s after/before | redis-server µs/req after/before |")
        w("|---|---:|---:|---:|---|---|---:|---:|")
        for after, before in pairs:
            a = R.per_cycle(after, "us_proxy")
            b = R.per_cycle(before, "us_proxy")
            q = [a[c] / b[c] for c in sorted(a) if c in b and b[c] > 0]
            if len(q) < 3:
                verdict_text = f"too few cycles to judge ({len(q)})"
            elif min(q) > 1.0:
                verdict_text = "**worse, beyond noise** (every cycle above 1.00)"
            elif max(q) < 1.0:
                verdict_text = "better, beyond noise (every cycle below 1.00)"
            else:
                verdict_text = "within noise (the per-cycle range holds 1.00)"
            av, bv = list(a.values()), list(b.values())
            redis = "redis" in after
            w(f"| {after} | {f(R.med(after, 'us_proxy'), '{:.2f}')} ({min(av):.2f}–{max(av):.2f}) "
              f"| {f(R.med(before, 'us_proxy'), '{:.2f}')} ({min(bv):.2f}–{max(bv):.2f}) "
              f"| {f(R.ratio(after, before, 'us_proxy'), '{:.3f}')} | {' / '.join(f'{x:.3f}' for x in q)} "
              f"| {verdict_text} | {f(R.ratio(after, before), '{:.3f}')} "
              f"| {f(R.ratio(after, before, 'us_redis'), '{:.3f}') if redis else '-'} |")
        w("")
        w("after = the rows above without a suffix (TIERPROXY_BIN, and the floor built here), before = the "
          "*_baseline rows (BASELINE_TIERPROXY_BIN, BASELINE_FLOOR_BIN); each pair ran back to back in every cycle (the baseline second in odd "
          "cycles, first in even ones). after/before = median of per-cycle ratios of proxy CPU µs per request; "
          "the run's noise is the min–max of those per-cycle ratios: within noise when that range holds 1.00, "
          "worse (better) when every cycle is above (below) 1.00, which 3 or more cycles are needed to judge. "
          "The min–max after each median is the per-cycle spread of that row alone, host drift included.")
        w("")

    # ---------------------------------------------------------------- store / catalog
    tp_runs = [n for n in names if (n.startswith("tierproxy_") or n == PEER) and R.has(n)]
    if tp_runs:
        w("## Store round trips and catalog queries per request")
        w("")
        w("| run | EVALSHA calls / req | EVAL calls / req | all Redis commands / req (incl. inside scripts) "
          "| Redis CPU µs / req (INFO cpu) | EVALSHA µs / call (commandstats) | SQLite statements in the run | SQLite statements / req |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|")
        for run in tp_runs:
            redis = "redis" in run
            sq = " / ".join(f"{int(r['sqlite_stmts'])}" for r in R.used(run)) if run != PEER else "-"
            w(f"| {run} | {f(R.med(run, 'evalsha_per_req'), '{:.3f}') if redis else '-'} "
              f"| {f(R.med(run, 'eval_per_req'), '{:.3f}') if redis else '-'} "
              f"| {f(R.med(run, 'redis_calls_per_req'), '{:.2f}') if redis else '-'} "
              f"| {f(R.med(run, 'redis_info_cpu_us'), '{:.2f}') if redis else '-'} "
              f"| {f(R.med(run, 'evalsha_us_per_call'), '{:.2f}') if redis else '-'} "
              f"| {sq} | {f(R.med(run, 'sqlite_per_req'), '{:.5f}') if run != PEER else '-'} |")
        w("")
        w("Redis figures are deltas of INFO commandstats and INFO cpu (used_cpu_sys + used_cpu_user) over "
          "the measured run, divided by the requests wrk counted. SQLite statements = sqlite3_step + "
          "sqlite3_exec calls in the tierproxy process, counted by an LD_PRELOAD shim "
          "(etc/bench/sqlite_count.c); the catalog's change check (PRAGMA data_version every refresh_ms) "
          "runs in the background, not per request.")
        w("")

    # ---------------------------------------------------------------- P7
    if p7:
        w("## P7: overload and the cost of a 429")
        w("")
        w(f"Goodput (2xx req/s) at -c{p7c} against -c{conns}, same cycle (wrk is closed-loop: twice the "
          "connections offer twice the concurrent load, not twice the rate):")
        w("")
        w(f"| store | goodput -c{conns} | goodput -c{p7c} | ratio | p99 ms -c{conns} | p99 ms -c{p7c} |")
        w("|---|---:|---:|---:|---:|---:|")
        for t in p7 + ([p7_floor] if p7_floor else []):
            hi = f"{t}@c{p7c}"
            w(f"| {t} | {f(R.med(t, 'goodput'), '{:.0f}')} | {f(R.med(hi, 'goodput'), '{:.0f}')} "
              f"| {f(R.ratio(hi, t, 'goodput'), '{:.2f}')} | {ms(R.med(t, 'p99_us'))} | {ms(R.med(hi, 'p99_us'))} |")
        w("")
        w("CPU of the proxy per request when every request is answered 429 (plan bench429, 1/min) "
          "against when every request is forwarded (plan bench), same cycle, same connections:")
        w("")
        w("| store | proxy µs / forwarded req | proxy µs / 429 | ratio | 429 share % | req/s all-429 | redis µs / 429 (INFO cpu) |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for t in p7:
            d = f"{t}@429"
            w(f"| {t} | {f(R.med(t, 'us_proxy'))} | {f(R.med(d, 'us_proxy'))} | {f(R.ratio(d, t, 'us_proxy'), '{:.2f}')} "
              f"| {f(R.med(d, 'non2xx_pct'))} | {f(R.med(d, 'rps'), '{:.0f}')} "
              f"| {f(R.med(d, 'redis_info_cpu_us'), '{:.2f}') if 'redis' in t else '-'} |")
        w("")

    # ---------------------------------------------------------------- verdicts
    w("## Targets")
    w("")

    def verdict(name, text, ok, detail):
        state = "not measured" if ok is None else ("met" if ok else "NOT met")
        w(f"- **{name}** {text}: **{state}** ({detail})")

    have_ng = R.has("nginx_proxy")
    r1 = R.ratio("tierproxy_redis", "nginx_proxy") if have_ng else None
    verdict("P1", f"Redis store ≥ {TARGETS['P1']}× nginx proxy_pass", None if r1 is None else r1 >= TARGETS["P1"],
            "no tierproxy_redis or nginx_proxy row" if r1 is None else
            f"{r1:.2f}×: {R.med('tierproxy_redis', 'rps'):.0f} vs {R.med('nginx_proxy', 'rps'):.0f} req/s")
    r2 = R.ratio("tierproxy_memory", "nginx_proxy") if have_ng else None
    verdict("P2", f"memory store ≥ {TARGETS['P2']}× nginx proxy_pass", None if r2 is None else r2 >= TARGETS["P2"],
            "no tierproxy_memory or nginx_proxy row" if r2 is None else
            f"{r2:.2f}×: {R.med('tierproxy_memory', 'rps'):.0f} vs {R.med('nginx_proxy', 'rps'):.0f} req/s")
    parts, oks = [], []
    for t in ("tierproxy_memory", "tierproxy_redis"):
        q = R.ratio(t, "nginx_proxy", "p99_us") if have_ng else None
        if q is not None:
            oks.append(q <= TARGETS["P3"])
            parts.append(f"{t[10:]} {ms(R.med(t, 'p99_us'))} ms = {q:.2f}×")
    verdict("P3", "p99 ≤ nginx proxy_pass's p99", all(oks) if oks else None,
            "no tierproxy or nginx_proxy row" if not oks else
            "; ".join(parts) + f" nginx_proxy's {ms(R.med('nginx_proxy', 'p99_us'))} ms")
    c4 = R.med("tierproxy_redis", "redis_info_cpu_us")
    verdict("P4", f"Redis CPU per limited request ≤ {TARGETS['P4']:g} µs", None if c4 is None else c4 <= TARGETS["P4"],
            "no tierproxy_redis row" if c4 is None else
            f"{c4:.2f} µs per request from INFO cpu; the EVALSHA itself {R.med('tierproxy_redis', 'evalsha_us_per_call'):.2f} "
            f"µs per call from INFO commandstats; redis-server process {R.med('tierproxy_redis', 'us_redis'):.2f} µs from /proc")
    parts, oks = [], []
    if R.has("tierproxy_redis"):
        per = [r["evalsha_per_req"] for r in R.used("tierproxy_redis")]
        oks.append(all(0.99 <= x <= 1.01 for x in per))
        parts.append("EVALSHA calls per request " + " / ".join(f"{x:.3f}" for x in per) + " (per cycle)")
    for t in ("tierproxy_memory", "tierproxy_redis"):
        if R.has(t):
            qs = [r["sqlite_per_req"] for r in R.used(t)]
            oks.append(all(x < 0.001 for x in qs))
            parts.append(f"SQLite statements per request ({t[10:]}) " + " / ".join(f"{x:.5f}" for x in qs))
    verdict("P6", "exactly one store round trip and zero SQLite queries per request", all(oks) if oks else None,
            "no tierproxy row" if not oks else "; ".join(parts))
    parts, oks = [], []
    for t in p7:
        g = R.ratio(f"{t}@c{p7c}", t, "goodput")
        c = R.ratio(f"{t}@429", t, "us_proxy")
        if g is not None:
            oks.append(g >= TARGETS["P7_goodput"])
            parts.append(f"{t[10:]}: goodput at -c{p7c} {g:.2f}× of -c{conns}")
        if c is not None:
            oks.append(c <= TARGETS["P7_429"])
            parts.append(f"{t[10:]}: a 429 costs {c:.2f}× the proxy CPU of a forwarded request")
    verdict("P7", f"at twice the load goodput ≥ {TARGETS['P7_goodput']:.0%} of peak, and a 429 costs ≤ "
            f"{TARGETS['P7_429']}× the CPU of forwarding", all(oks) if oks else None,
            "P7 runs skipped" if not oks else "; ".join(parts))
    w("")
    w("P1, P2: median of per-cycle req/s ratios. P3: median of per-cycle p99 ratios. P4: median over "
      "cycles. P6: every cycle must give 0.99-1.01 EVALSHA calls and < 0.001 SQLite statements per request. "
      "P7: medians of per-cycle ratios, for each store.")
    w("")

    # ---------------------------------------------------------------- speed II verdicts
    w("## Targets S1–S6 (issue 15: at the floor of libmicrohttpd + libcurl, ahead of the nginx + Lua + Redis peer)")
    w("")

    def missing(run):
        base = run.split("@")[0]
        why = meta.get("skip." + base)
        if why:
            return f"no {run} row (skipped: see the throughput table)"
        if base in active and run != base:
            return f"no {run} runs (P7=0)"
        return f"no {run} row (not in ROWS)"

    def part(run, ref, key, limit, at_least, what, show):
        """one condition on the median of per-cycle ratios run[key] / ref[key]: (ok or None, text)"""
        q = R.ratio(run, ref, key)
        if q is None:
            gone = [x for x in (run, ref) if not R.has(x)]
            return None, f"{what}: not measured ({'; '.join(missing(x) for x in gone) or 'no cycle with both'})"
        ok = q >= limit if at_least else q <= limit
        return ok, (f"{what} {q:.2f}× (target {'≥' if at_least else '≤'} {limit:g}×): "
                    f"{show(R.med(run, key))} vs {show(R.med(ref, key))}")

    def s_verdict(name, text, parts, notes=()):
        """parts: the target's conditions, (ok or None, text); notes: texts shown after them"""
        oks = [ok for ok, _ in parts]
        ok = False if any(o is False for o in oks) else (None if any(o is None for o in oks) else True)
        verdict(name, text, ok, "; ".join([d for _, d in parts] + list(notes)))

    rps = lambda x: f"{x:.0f} req/s"
    cpu = lambda x: f"{x:.2f} µs"
    p99 = lambda x: f"{ms(x)} ms"
    gput = lambda x: f"{x:.0f} 2xx/s"
    s_verdict("S1", f"redis store ≥ {SPEED['S1_rps_vs_peer']}× the nginx + Lua + Redis peer's req/s, with proxy CPU "
              f"per request ≤ {SPEED['S1_cpu_vs_floor']}× floor_proxy_opt's", [
                  part("tierproxy_redis", PEER, "rps", SPEED["S1_rps_vs_peer"], True, "req/s vs the peer", rps),
                  part("tierproxy_redis", FLOOR, "us_proxy", SPEED["S1_cpu_vs_floor"], False,
                       "proxy CPU per request vs the floor", cpu)])
    s_verdict("S2", f"memory store proxy CPU per request ≤ {SPEED['S2_cpu_vs_floor']}× floor_proxy_opt's, and req/s "
              f"≥ {SPEED['S2_rps_vs_floor']}× its req/s", [
                  part("tierproxy_memory", FLOOR, "us_proxy", SPEED["S2_cpu_vs_floor"], False,
                       "proxy CPU per request vs the floor", cpu),
                  part("tierproxy_memory", FLOOR, "rps", SPEED["S2_rps_vs_floor"], True, "req/s vs the floor", rps)])
    s_verdict("S3", f"p99 ≤ the peer's p99 (redis store) and ≤ {SPEED['S3_p99_vs_floor']}× floor_proxy_opt's "
              "(memory store)", [
                  part("tierproxy_redis", PEER, "p99_us", SPEED["S3_p99_vs_peer"], False, "redis store p99 vs the peer", p99),
                  part("tierproxy_memory", FLOOR, "p99_us", SPEED["S3_p99_vs_floor"], False,
                       "memory store p99 vs the floor", p99)])
    parts = []
    if R.has("tierproxy_redis"):
        c = R.med("tierproxy_redis", "us_redis")
        detail = (f"{c:.2f} µs per request of redis-server's process (/proc), target ≤ {SPEED['S4_redis_us']:g}; "
                  f"INFO cpu {R.med('tierproxy_redis', 'redis_info_cpu_us'):.2f} µs")
        if R.has(PEER):
            detail += f"; the peer's {R.med(PEER, 'us_redis'):.2f} µs (/proc)"
        parts.append((c <= SPEED["S4_redis_us"], detail))
        per = [r["evalsha_per_req"] for r in R.used("tierproxy_redis")]
        parts.append((all(0.99 <= x <= 1.01 for x in per),
                      "EVALSHA calls per request " + " / ".join(f"{x:.3f}" for x in per) + " (per cycle)"))
    else:
        parts.append((None, missing("tierproxy_redis")))
    s_verdict("S4", f"Redis CPU per check ≤ {SPEED['S4_redis_us']:g} µs with the default sliding log; EVALSHA per "
              "request stays 1.000", parts)
    parts = []
    if int(p7c) != 2 * int(conns):
        parts.append((None, f"the overload runs were at -c{p7c}, not twice -c{conns} (P7_CONNS)"))
    for t in ("tierproxy_memory", "tierproxy_redis"):
        store = t[10:]
        parts.append(part(f"{t}@c{p7c}", t, "goodput", SPEED["S5_goodput"], True,
                          f"{store}: goodput at -c{p7c} vs -c{conns}", gput))
        parts.append(part(f"{t}@429", t, "us_proxy", SPEED["S5_429"], False,
                          f"{store}: proxy CPU of a 429 vs a forward", cpu))
    if s5t:
        parts.append(part(s5_429, s5_fwd, "us_proxy", SPEED["S5_429"], False,
                          f"memory at -c{s5c}, side by side: proxy CPU of a refusal kept alive vs a forward", cpu))
    else:
        parts.append((None, "the S5 runs (a refusal kept alive at -cS5_CONNS) were not run (S5=0, or no tierproxy_memory row)"))
    notes = []
    if p7_floor and R.has(f"{p7_floor}@c{p7c}"):
        g = R.ratio(f"{p7_floor}@c{p7c}", p7_floor, "goodput")
        notes.append(f"for reference, {p7_floor}'s own goodput at -c{p7c} vs -c{conns}: "
                     f"{g:.2f}×" if g is not None else f"{p7_floor} at -c{p7c}: no ratio")
    s_verdict("S5", f"offered 2× the connections, goodput ≥ {SPEED['S5_goodput']}× of -c{conns} on both stores; a 429 "
              f"costs ≤ {SPEED['S5_429']}× a forward", parts, notes)
    s6 = f"an idle WebSocket tunnel ≤ {SPEED['S6_rss_bytes'] // 1024} KiB ({SPEED['S6_rss_bytes']:,} bytes) of " \
         "proxy RSS at 9,900 tunnels, 0 CPU idle"
    opened, nbytes, idle = meta.get("ws_idle.opened", "").split(), meta.get("ws_idle.bytes", ""), \
        meta.get("ws_idle.cpu", "").split()
    if len(opened) == 2 and nbytes and len(idle) == 2:
        held, want = int(opened[0]), int(opened[1])
        cpu_s, idle_s = float(idle[0]), float(idle[1])
        # /proc/PID/stat counts in clock ticks (10 ms): one tick per 10 s idle is noise
        ok = held == want and meta.get("ws_idle.echo") == "ok" and \
            int(nbytes) <= SPEED["S6_rss_bytes"] and cpu_s <= 0.010 * max(1.0, idle_s / 10)
        verdict("S6", s6, ok, f"{held} of {want} tunnels open, echo {meta.get('ws_idle.echo') or '?'}, "
                f"{int(nbytes):,} bytes of proxy RSS each, {cpu_s:.3f} s CPU over {idle_s:.0f} s idle "
                "(etc/ws_idle.py, memory store, one worker: ws_idle.txt)")
    else:
        verdict("S6", s6, None, "etc/ws_idle.py not run (WS_IDLE=0, no tierproxy_memory row) or its output "
                "not understood: see ws_idle.txt")
    w("")
    if s5t and R.has(s5_fwd) and R.has(s5_429):
        w("")
        w(f"S5 runs, per cycle ({s5t}, wrk -t1 -c{s5c}, the bench keys and the bench429 keys back to back, "
          "their order swapped every cycle; system calls per request counted in each run's warm-up with "
          "`perf stat -e raw_syscalls:sys_enter`, every thread of the proxy):")
        w("")
        w("| cycle | forward: proxy µs/req | refusal: proxy µs/req | ratio | forward req/s | refusal req/s "
          "| refusal non-2xx % | syscalls/req forward | syscalls/req refusal |")
        w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        a, b = {r["cycle"]: r for r in R.used(s5_fwd)}, {r["cycle"]: r for r in R.used(s5_429)}
        sc = lambda r: "-" if r.get("syscalls_per_req", -1) < 0 else f"{r['syscalls_per_req']:.2f}"
        for c in sorted(set(a) & set(b)):
            w(f"| {int(c)} | {a[c]['us_proxy']:.2f} | {b[c]['us_proxy']:.2f} | {b[c]['us_proxy'] / a[c]['us_proxy']:.3f} "
              f"| {a[c]['rps']:.0f} | {b[c]['rps']:.0f} | {b[c]['non2xx_pct']:.1f} | {sc(a[c])} | {sc(b[c])} |")
        w("")
    w("Every S ratio is the median of per-cycle ratios of the two rows (both measured in the same cycle), "
      "as for P1–P3; CPU per request is the proxy's process group (/proc) ÷ requests wrk counted. The peer "
      f"is {PEER}, the floor {FLOOR}. S4: redis-server's process-group CPU per request in the tierproxy_redis "
      "run (how ../shared/bench/run.sh measured today's 8.7 µs), the same as per check while EVALSHA per "
      "request is 1.000 (0.99–1.01 in every cycle, as P6). S5 reads the P7 runs (-c2×CONNS and all-429) and the S5 runs "
      "(memory store, -cS5_CONNS: a refusal kept alive against a forward, back to back; issue 25). "
      "A target whose rows are missing is \"not measured\", unless a part that was measured already misses it.")
    w("")

    # ---------------------------------------------------------------- rows and commands
    w("## Rows and commands")
    w("")
    w(f"- **upstream**: {meta['desc.upstream']}")
    for row in active:
        w(f"- **{row}**: {meta.get('desc.' + row, '')}")
    if p7:
        w(f"- **TARGET@c{p7c}**: the same proxy at -c{p7c}; **TARGET@429**: the same proxy, -c{conns}, "
          "keys of plan bench429 (1/min), so every request after the first of each key in a minute gets 429")
    if s5t:
        w(f"- **{s5_fwd}**, **{s5_429}**: {s5t} at -c{s5c} with the bench keys (forwarded) and with the bench429 "
          "keys (refused with 429 on the same kept-alive connections), back to back in every cycle")
    w("")
    w("```")
    w(f"# {meta['command']}   (from the repository's root)")
    w(f"WRK_KEYFILE=<keys.txt> wrk -t1 -c{conns} -d{meta['duration']}s --latency --timeout 5s "
      "-s etc/bench/wrk-keys.lua http://127.0.0.1:<PORT>/")
    for k, v in meta.items():
        if k.startswith("cmd."):
            w(v)
    w("```")
    w("")
    w(f"Raw wrk outputs, per-run figures (runs.txt), configs, keys and logs: {meta['results']}/")
    print("\n".join(out))


if __name__ == "__main__":
    main()
