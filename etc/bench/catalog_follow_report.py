"""The Markdown report of etc/bench/catalog_follow.py: what a run measured, in the order the
run measured it (publications without load, then the windows without and with one)."""
import os
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def med(v):
    return statistics.median(v) if v else float("nan")


def span(v, fmt="{:.2f}"):
    """median (min–max)"""
    return f"{fmt.format(med(v))} ({fmt.format(min(v))}–{fmt.format(max(v))})" if v else "-"


def slow_by(slow, word):
    """The slowest Redis command of a kind, in ms: 'EVAL' (the swap), 'SET'/'GET' (a chunk), 'HMGET' (a head)."""
    v = [us for cmd, us, _ in slow if cmd == word]
    return max(v) / 1000 if v else 0.0


def report_publications(B, w):
    pubs, names = B.pubs, [p.name for p in B.proxies]
    w("## 1. From `tierctl key create` (follow = redis: it publishes) to the last proxy serving the new key")
    w("")
    w("No load. Times in seconds from the command's start; each proxy polled with the new key every "
      f"{B.a.poll_ms} ms. \"installed\" = the proxy's own line (`installed in ... ms`); \"line\" = when that "
      "line appeared on its stderr.")
    w("")
    w("| # | version | tierctl wall / CPU | " + " | ".join(f"{n}: line / served / installed in ms" for n in names)
      + " | last proxy served |")
    w("|---|---:|---:|" + "---:|" * len(names) + "---:|")
    for i, p in enumerate(pubs):
        cells = [f"{p['logged'].get(n, float('nan')):.2f} / {p['served'][n]:.2f} / {p['installs'][n][1]}"
                 for n in names]
        w(f"| {i + 1} | {p['version']} | {p['ctl_wall']:.2f} / {p['ctl_cpu']:.2f} | " + " | ".join(cells)
          + f" | **{p['last']:.2f}** |")
    last = [p["last"] for p in pubs]
    w(f"| median | | {med([p['ctl_wall'] for p in pubs]):.2f} / {med([p['ctl_cpu'] for p in pubs]):.2f} | "
      + " | ".join(f"{med([p['logged'].get(n, float('nan')) for p in pubs]):.2f} / "
                   f"{med([p['served'][n] for p in pubs]):.2f} / {med([p['installs'][n][1] for p in pubs]):.0f}"
                   for n in names)
      + f" | **{med(last):.2f}** (max {max(last):.2f}) |")
    w("")
    w("Where the time goes (medians over publications and proxies, seconds):")
    w("")
    ctl = [p["ctl_wall"] for p in pubs]
    inst = [p["installs"][n][1] / 1000 for p in pubs for n in names]
    before = [p["logged"][n] - p["installs"][n][1] / 1000 - p["ctl_wall"] for p in pubs for n in names
              if n in p["logged"]]
    after = [p["served"][n] - p["logged"][n] for p in pubs for n in names if n in p["logged"]]
    w(f"- the tierctl command (insert the key; publish: the rows it wrote or in which the file differs, or the "
      f"image in chunks when the chain "
      f"since the last image is full): {span(ctl)}")
    w(f"- from its end to the proxy's install starting (wait for the next poll, at most refresh_ms = "
      f"{B.a.refresh_ms} ms; HMGET of the rows, or GET of the image's chunks; sha256): {span(before)}")
    w(f"- the install (the rows applied to the db file and their keys checked, or the image written beside it, "
      f"checked and renamed over it): "
      f"{span(inst)}")
    w(f"- from the install's line to the key served (the snapshot patched with the keys, or rebuilt from the file, "
      f"and swapped in, "
      f"± one {B.a.poll_ms} ms poll): {span(after)}")
    w("")
    w("What does not wait (per publication; median (min–max)):")
    w("")
    thr = [p["thread"][n] for p in pubs for n in names]
    whole = [p["delta"]["proxy"][n] for p in pubs for n in names]
    w(f"- published: {pubs[0]['image_bytes']:,} bytes (the image is {B.first['image_bytes']:,}; each proxy's line "
      f"says: "
      f"{sorted({p['installs'][n][0] for p in pubs for n in names})}); Redis bytes in "
      f"{span([p['delta']['redis_in'] / 1e6 for p in pubs], '{:.1f}')} MB, out "
      f"{span([p['delta']['redis_out'] / 1e6 for p in pubs], '{:.1f}')} MB (the publication; with --local, "
      f"tierctl's read of the fleet's catalog; each proxy's fetch)")
    w(f"- CPU of each proxy's catalog thread (fetch, install, rebuild; schedstat): {span(thr)} s; whole proxy "
      f"process: {span(whole)} s")
    w(f"- CPU of tierctl: {span([p['ctl_cpu'] for p in pubs])} s; of redis-server: "
      f"{span([p['delta']['redis_cpu'] for p in pubs])} s")
    w("- Redis busy in one command (SLOWLOG, the longest of each kind): EVAL "
      f"{span([slow_by(p['slow'], 'EVAL') for p in pubs], '{:.1f}')} ms, SET of a chunk "
      f"{span([slow_by(p['slow'], 'SET') for p in pubs], '{:.1f}')} ms, GET of a chunk "
      f"{span([slow_by(p['slow'], 'GET') for p in pubs], '{:.1f}')} ms, HMGET "
      f"{span([slow_by(p['slow'], 'HMGET') for p in pubs], '{:.1f}')} ms; "
      "a check waits at most that long behind one")
    w(f"- box: other processes {span([p['delta']['other_pct'] for p in pubs], '{:.0f}')} % of a core, "
      f"steal {span([p['delta']['steal_pct'] for p in pubs], '{:.0f}')} %")
    w("")
    if B.profiled:
        w(f"Profile: one more publication (version {B.profiled['version']}, not counted above; last proxy served "
          f"{B.profiled['last']:.2f} s) under `perf record -F 250 --call-graph dwarf` of proxy A and redis-server: "
          "perf-proxyA-{self,children}.txt (proxy A's catalog thread only) and perf-redis-*.txt in the results.")
        w("")
    ok = max(last) <= 3.0
    w(f"**Target: within 3 s of publication on every following proxy: {'met' if ok else 'NOT met'}** "
      f"(median {med(last):.2f} s, max {max(last):.2f} s over {len(last)} publications).")
    w("")


def report_windows(B, w, pairs, title):
    names = [p.name for p in B.proxies]
    if not pairs:
        return None
    c = pairs[0]["quiet"]
    w(f"## {title}")
    w("")
    load = (f"wrk -t1 -c{c['conns']} per proxy, each connection waiting {c['delay_ms']} ms between an answer and "
            "its next request" if c["delay_ms"] else f"wrk -t1 -c{c['conns']} per proxy, no pacing")
    w(f"{load}; {B.a.window} s windows; in a window \"with\", `tierctl key create` starts {B.a.lead} s in "
      "(the column \"publication\" says when, after the window's start, it began and when the last proxy served it).")
    w("")
    w("| window | " + " | ".join(f"{n} req/s | {n} p50 ms | {n} p99 ms | {n} max ms | {n} CPU %" for n in names)
      + " | non-2xx | catalog thread CPU s | redis % | Redis's longest command ms | other % | publication |")
    w("|---|" + "---:|" * (5 * len(names)) + "---:|---:|---:|---:|---:|---|")
    for i, pair in enumerate(pairs):
        for kind in ("quiet", "pub"):
            win = pair[kind]
            d, cells = win["delta"], []
            for n in names:
                r = win["wrk"][n]
                cells.append(f"{r['requests'] * 1e6 / r['duration_us']:.0f} | {r['lat_p50_us'] / 1000:.2f} | "
                             f"**{r['lat_p99_us'] / 1000:.2f}** | {r['lat_max_us'] / 1000:.1f} | "
                             f"{100 * d['proxy'][n] / d['wall']:.0f}")
            bad = int(sum(win["wrk"][n]["err_status"] + win["wrk"][n]["err_timeout"] for n in names))
            thr = " / ".join(f"{d['tasks'][n].get(p.catalog_thread, 0.0):.2f}" for n, p in zip(names, B.proxies))
            pub = win["pub"]
            when = f"{pub['start']:.1f} → {pub['start'] + pub['last']:.1f} s" if pub else "-"
            if pub and pub["start"] + pub["last"] > B.a.window:
                when += " (past the window's end)"
            longest = max((us for _, us, _ in win["slow"]), default=0) / 1000
            w(f"| {i + 1} {'with' if pub else 'without'} | " + " | ".join(cells)
              + f" | {bad} | {thr} | {100 * d['redis_cpu'] / d['wall']:.0f} | {longest:.0f} | {d['other_pct']:.0f} "
              f"| {when} |")
    w("")
    ratios = {n: [p["pub"]["wrk"][n]["lat_p99_us"] / p["quiet"]["wrk"][n]["lat_p99_us"] for p in pairs] for n in names}
    p50r = {n: [p["pub"]["wrk"][n]["lat_p50_us"] / p["quiet"]["wrk"][n]["lat_p50_us"] for p in pairs] for n in names}
    for n in names:
        w(f"- proxy {n}: p99 with / without, per pair: {' / '.join(f'{x:.2f}' for x in ratios[n])}; median "
          f"**{med(ratios[n]):.2f}×**; p50 median {med(p50r[n]):.2f}×")
    lasts = [p["pub"]["pub"]["last"] for p in pairs]
    w(f"- publication to the last proxy serving, under this load: {' / '.join(f'{x:.2f}' for x in lasts)} s")
    w("")
    return max(med(ratios[n]) for n in names)


def report(B, started, command):
    out = []
    w = out.append
    f = B.first
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    w(f"# A catalog of {B.a.users:,} users and {B.a.keys:,} keys followed by two proxies ({started}, commit {commit})")
    w("")
    with open("/proc/cpuinfo") as cf:
        model = next((ln.split(":", 1)[1].strip() for ln in cf if ln.startswith("model name")), "?")
    w(f"Machine: {os.cpu_count()} CPUs ({model}), shared. Everything on 127.0.0.1: one redis-server, "
      f"etc/bench/upstream.c, two tierproxy (workers = 1, store = {B.a.store}, follow = redis, refresh_ms = "
      f"{B.a.refresh_ms}, each its own db file), tierctl on the same box.")
    w("")
    w(f"Command: `{command}`")
    w("")
    w(f"Catalog: JSON {f['json_bytes'] / 1e6:.1f} MB made in {f['generate_s']:.1f} s; `tierctl import` with "
      f"follow = redis (it publishes version {f['version']}) {f['import_wall_s']:.1f} s "
      f"({f['import_cpu_s']:.1f} s CPU); "
      f"image {f['image_bytes']:,} bytes; both proxies started on empty db files served it "
      f"{f['proxies_start_s']:.1f} s after their start. Proxy RSS at the end (now / peak): "
      + ", ".join(f"{n} {r[0] / 1024:.0f} / {r[1] / 1024:.0f} MiB" for n, r in B.rss.items()) + ".")
    w("")
    report_publications(B, w)
    worst = report_windows(B, w, B.paced, "2. Request latency, windows without and with a publication (moderate load)")
    report_windows(B, w, B.saturated, "3. The same at saturation, for comparison")
    if worst is not None:
        verdict = "met" if worst <= 1.2 else "NOT met"
        w(f"**Target: p99 during the swap ≤ 1.2× without it (moderate load): {verdict}** "
          f"(the worse proxy's median of per-pair ratios: {worst:.2f}×).")
        w("")
    w("CPU % = that process's CPU over the window (100 % = one core); redis % likewise; other % = the box's busy "
      "CPU (/proc/stat) less every process this benchmark started (proxies, redis, upstream, wrk, tierctl, "
      "itself): other people's work on this shared box. Catalog thread CPU = the proxy's catalog thread (the one "
      "waiting on a futex between polls), from /proc/PID/task/TID/schedstat. Redis's longest command = the longest "
      "SLOWLOG entry of the window (commands of 1 ms or more; 0: none): every limit check waits behind it.")
    w("")
    w(f"Raw figures, proxies' stderr, wrk outputs: {B.results}/")
    return "\n".join(out)
