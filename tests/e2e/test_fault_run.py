"""SPEC "Faults keep their promises", as one fault-injection run: two proxies of two workers
each on one Redis (with a password), a plan with a concurrency limit of N, one user's HTTP
requests and WebSocket tunnels looping through both proxies under bounded load for the
whole run. Redis is killed (and started again on its port), filled to maxmemory, paused
(CLIENT PAUSE), its password changed, and restarted empty, each in turn, each removed
before the next. The upstream (timeline_upstream.py) records every request and tunnel:
its arrival, its end and the proxy it came through, so the test knows how many were in
flight at every arrival.

For each fault:
- from its start to its removal, no arrival finds more than N in flight through its proxy
  (local mode counts per proxy, not per worker, and the leases the proxy held in Redis
  count against it);
- from 1 s after the removal on (SPEC: enforcement is back on the store within 1 s), no
  arrival finds more than N in flight fleet-wide, those admitted during the outage and
  still running included (they were registered in the store before it decided again);
- requests were admitted during it (restarted empty: requests and tunnels were in flight
  when Redis went away) and after it;
- each proxy names it on stderr ("store unreachable ..."; "store error: ... OOM ...";
  "store error: ... WRONGPASS|NOAUTH ...") and in /health ("store": "local", what decides
  while the store is unreachable, or "error" with a "store_error" naming OOM, WRONGPASS or
  NOAUTH); /health's store is "ok" again within a few seconds of the removal.
Neither password ever appears on stderr.

Two faults that can write a line of the same cause (a connection Redis closes, a connection
refused) start SAME_CAUSE_S apart, more than the 10 s SPEC allows between two stderr lines
of one cause; the others follow each other as soon as the one before has been checked. The
restart-empty fault comes last, and its Redis comes back as soon as both proxies have
noticed it is gone: a restart that is quick, with slots held through it.

With -s the run prints a summary per fault (also in the junit properties and in
fault_run_summary.txt, with the whole timeline in fault_run_timeline.json, in the test's
temporary directory)."""
import datetime
import json
import re
import secrets
import time

import pytest

from conftest import SLOW, wait_until
from fault_run_helpers import (HealthPoller, Load, PasswordRedis, TimelineUpstream,
                               in_flight_at, in_flight_at_arrivals)
from fleet_helpers import fleet

N = 3                   # the plan's concurrency limit
WARMUP_S = 1.5          # load before the first fault (checked fleet-wide too)
FAULT_S = 2.0           # how long a fault lasts (but restart-empty)
SAME_CAUSE_S = 10.8     # from one fault's start to the next one's that shares a cause
RETURN_S = 1.0          # SPEC: enforcement back on the store within 1 s of its return
MIN_CHECKED_S = 1.5     # normal operation checked fleet-wide after each fault, at least
BACK_OK_S = 5.0 * SLOW  # /health "ok" again after a removal, at most
LEFTOVER_WAIT_S = 1.0   # a fault lasts up to this much longer, for a leftover tunnel
LEASE_TTL_MS = 2000     # short: a lease lost in Redis is put back (renewed) often


# --------------------------------------------------------------------------------------
# the faults

class Fault:
    def __init__(self, name, causes, inject, remove, stderr_re, health_named, hold=None, prepare=None):
        hold = hold or with_a_leftover
        self.name = name
        self.causes = causes                     # what its stderr lines can say
        self.inject, self.remove, self.hold, self.prepare = inject, remove, hold, prepare
        self.stderr_re = re.compile(stderr_re)
        self.health_named = health_named
        self.start = self.removal = self.end = None
        self.start_wall = self.removal_wall = None
        self.err_from = self.err_to = None
        self.quick = hold is until_both_named    # over as soon as noticed


def unreachable(s):
    # on_store_error = local (the default) decides while the store is unreachable
    return s[2] == "local"


def unreachable_or_error(s):
    return s[2] in ("local", "error")


def store_error_names(*words):
    def named(s):
        return s[2] == "error" and any(w in str(s[3] or "") for w in words)
    return named


def kill(run):
    run.redis.stop()


def start_again(run):
    run.redis.start()


def fill(run):
    run.redis.cmd("CONFIG", "SET", "maxmemory-policy", "noeviction")
    run.redis.cmd("CONFIG", "SET", "maxmemory", "1")    # below used_memory: writes get OOM


def unfill(run):
    run.redis.cmd("CONFIG", "SET", "maxmemory", "0")


def pause(run):
    run.redis.cmd("CLIENT", "PAUSE", str(int(FAULT_S * 1000)), "ALL")


def pause_over(run):
    run.redis.cmd("PING")      # answered when the pause ends


def change_password(run):
    run.redis.change_password(run.new_password)
    # the proxies' connections stay authenticated until they reconnect
    run.redis.cmd("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")


def old_password(run):
    run.redis.change_password(run.old_password)


def tunnels_in_flight(run):
    """Before Redis restarts empty: a tunnel open that will outlive the restart by more
    than RETURN_S, its lease lost with Redis' data."""
    wait_until(lambda: run.load.tunnels_open(left=RETURN_S + 0.5) >= 1, 3 * SLOW,
               interval=0.01)


def shutdown(run):
    run.redis.shutdown_nosave()


def until_both_named(run, fault):
    """Redis restarts as soon as both proxies' /health say it is gone."""
    run.poller.wait_for(lambda s: s[2] not in (None, "ok"), 3 * SLOW, since=fault.start)


def with_a_leftover(run, fault):
    """FAULT_S, then (up to LEFTOVER_WAIT_S more) until a tunnel admitted during the
    outage is open that will still be open RETURN_S after the removal: the fleet-wide
    check after the return has a leftover of the outage to count."""
    sleep_until(fault.start + FAULT_S)
    wait_until(lambda: run.load.tunnels_open(opened_after=fault.start + 0.5,
                                             left=RETURN_S + 0.3) >= 1,
               LEFTOVER_WAIT_S, interval=0.01)


def fixed(run, fault):
    # CLIENT PAUSE ends when it said: CLIENT UNPAUSE waits for it like any command
    sleep_until(fault.start + FAULT_S)


def faults():
    return [
        Fault("killed", {"closed", "refused"}, kill, start_again, r"store unreachable", unreachable),
        Fault("password", {"closed", "wrongpass"}, change_password, old_password,
              r"store error: .*(WRONGPASS|NOAUTH)", store_error_names("WRONGPASS", "NOAUTH")),
        Fault("maxmemory", {"oom"}, fill, unfill, r"store error: .*OOM", store_error_names("OOM")),
        Fault("paused", {"timeout"}, pause, pause_over, r"store unreachable", unreachable_or_error,
              hold=fixed),
        Fault("restarted-empty", {"closed", "refused"}, shutdown, start_again, r"store unreachable",
              unreachable, hold=until_both_named, prepare=tunnels_in_flight),
    ]


# --------------------------------------------------------------------------------------
# the run

class Run:
    def __init__(self, redis, proxies, load, poller, old_password, new_password):
        self.redis, self.proxies, self.load, self.poller = redis, proxies, load, poller
        self.old_password, self.new_password = old_password, new_password

    def stderr_offsets(self):
        return {via: len(p.stderr_path.read_bytes()) for via, p in self.proxies.items()}

    def back_to_normal(self, fault):
        """After a removal: stderr taken until RETURN_S after it, /health ok awaited."""
        sleep_until(fault.removal + RETURN_S)
        fault.err_to = self.stderr_offsets()
        self.poller.wait_for(lambda s: s[2] == "ok", BACK_OK_S, since=fault.removal)

    def inject(self, fault):
        if fault.prepare:
            fault.prepare(self)
        fault.start, fault.start_wall = time.monotonic(), time.time()
        fault.err_from = self.stderr_offsets()
        fault.inject(self)
        fault.hold(self, fault)
        fault.remove(self)
        fault.removal, fault.removal_wall = time.monotonic(), time.time()

    def run(self, fs, t_first):
        sleep_until(t_first)
        for i, f in enumerate(fs):
            if i:
                prev = fs[i - 1]
                self.back_to_normal(prev)
                kin = [g.start + SAME_CAUSE_S for g in fs[:i] if g.causes & f.causes]
                sleep_until(max(kin + [prev.removal + RETURN_S + MIN_CHECKED_S]))
            self.inject(f)
            if i:
                fs[i - 1].end = f.start
        self.back_to_normal(fs[-1])
        sleep_until(fs[-1].removal + RETURN_S + MIN_CHECKED_S)
        fs[-1].end = time.monotonic()


def sleep_until(t):
    d = t - time.monotonic()
    if d > 0:
        time.sleep(d)


# --------------------------------------------------------------------------------------
# what the run shows

def wall_of(stamp):
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def local_decisions(p, t_from, t_to):
    """Wall times of the access log's "local" decisions of p in [t_from, t_to)."""
    out = []
    for ln in p.access_log_lines():
        if ln.get("decision") == "local":
            t = wall_of(ln.get("decision_time") or ln["time"])
            if t_from <= t < t_to:
                out.append(t)
    return sorted(out)


def over(arrivals, t0):
    """The first arrival past N, described."""
    for t, e, n in arrivals:
        if n > N:
            return "%d in flight at the arrival of %s %s via %s at %s" % (
                n, e["kind"], e["path"], e["via"], rel(t, t0))
    return None


def rel(t, t0):
    return "%+.2fs" % (t - t0) if t is not None else "never"


def most(arrivals):
    return max([n for _, _, n in arrivals] or [0])


def check_fault(f, events, run, vias):
    """(summary lines, failures) of one fault."""
    lines, fails = check_in_flight(f, events, run, vias)
    for via, p in sorted(run.proxies.items()):
        lines += check_named(f, via, p, run, fails)
    return lines, fails


def check_in_flight(f, events, run, vias):
    """Per proxy during the fault, fleet-wide from RETURN_S after its removal: (summary
    lines, failures)."""
    fails = []
    during = {via: in_flight_at_arrivals(events, f.start, f.removal, via) for via in vias}
    back = {via: in_flight_at_arrivals(events, f.removal, f.removal + RETURN_S, via)
            for via in vias}
    after = in_flight_at_arrivals(events, f.removal + RETURN_S, f.end)
    admitted = sum(len(a) for a in during.values())
    outcomes = run.load.outcomes(f.start, f.removal)
    for via, a in during.items():
        if over(a, f.start):
            fails.append("%s: proxy %s admitted past N=%d during the outage: %s"
                         % (f.name, via, N, over(a, f.start)))
    if over(after, f.start):
        fails.append("%s: past N=%d fleet-wide %.0f s after Redis was back or later: %s"
                     % (f.name, N, RETURN_S, over(after, f.start)))
    if f.quick and in_flight_at(events, f.start) < 1:
        fails.append("%s: nothing in flight when Redis went away" % f.name)
    if not f.quick and admitted < 1:
        fails.append("%s: nothing admitted during the fault (attempts %s)" % (f.name, outcomes))
    if not after:
        fails.append("%s: nothing admitted after Redis was back" % f.name)
    t_back = f.removal + RETURN_S
    still = [e for e in events if e["t0"] < t_back and (e["t1"] is None or e["t1"] > t_back)]
    return ["%s: %.2f s; during: %d admitted (attempts %s), max in flight per proxy %s; "
            "in the first %.0f s back: max per proxy %s; after: %d admitted, max fleet-wide %d"
            % (f.name, f.removal - f.start, admitted, dict(sorted(outcomes.items(), key=str)),
               {via: most(a) for via, a in during.items()}, RETURN_S,
               {via: most(a) for via, a in back.items()}, len(after), most(after)),
            "  in flight when it began: %d; %.0f s after the removal, still in flight: %d "
            "admitted before it began, %d since"
            % (in_flight_at(events, f.start), RETURN_S,
               sum(1 for e in still if e["t0"] < f.start),
               sum(1 for e in still if e["t0"] >= f.start))], fails


def check_named(f, via, p, run, fails):
    """Stderr, /health and the access log of proxy via for fault f: summary lines."""
    text = p.stderr_path.read_bytes()[f.err_from[via]:f.err_to[via]].decode("utf-8", "replace")
    named_lines = [ln for ln in text.splitlines() if f.stderr_re.search(ln)]
    if not named_lines:
        fails.append("%s: proxy %s wrote no stderr line matching %r during it (wrote: %r)"
                     % (f.name, via, f.stderr_re.pattern, text[-600:]))
    samples = run.poller.between(via, f.start, f.removal)
    named = [s for s in samples if f.health_named(s)]
    if not named:
        fails.append("%s: proxy %s's /health never named it during it (%d samples, the last %s)"
                     % (f.name, via, len(samples), samples[-1][4] if samples else None))
    ok = [s for s in run.poller.between(via, f.removal, f.end) if s[2] == "ok"]
    back = ok[0][0] - f.removal if ok else None
    if back is None or back > BACK_OK_S:
        fails.append("%s: proxy %s's /health store not \"ok\" within %.0f s of the removal"
                     % (f.name, via, BACK_OK_S))
    local = local_decisions(p, f.start_wall, f.removal_wall + RETURN_S)
    return ["  proxy %s: stderr %s; /health named %s (%s); ok again %s after the removal; "
            "%d local decisions, the first %s"
            % (via, repr(named_lines[0][:120]) if named_lines else "nothing",
               rel(named[0][0], f.start) if named else "never",
               named[0][4] if named else (samples[-1][4] if samples else "no sample"),
               "%.2fs" % back if back is not None else "never", len(local),
               rel(local[0], f.start_wall) if local else "never")]


def report(tmp_path, record_property, lines, events, fs, run):
    text = "\n".join(lines)
    print("\n" + text)
    record_property("fault_run", text)
    (tmp_path / "fault_run_summary.txt").write_text(text + "\n")
    with open(tmp_path / "fault_run_timeline.json", "w") as f:
        json.dump({"N": N, "events": events,
                   "faults": [{k: getattr(x, k) for k in ("name", "start", "removal", "end")}
                              for x in fs],
                   "health": run.poller.samples, "attempts": run.load.records}, f)


# --------------------------------------------------------------------------------------

@pytest.fixture
def password_redis(tmp_path):
    """Before proxies in a test's arguments: torn down after the proxies have stopped."""
    r = PasswordRedis(tmp_path / "redis", "fr-old-" + secrets.token_hex(8))
    yield r
    r.close()


@pytest.fixture
def timeline_upstream(tmp_path):
    u = TimelineUpstream(tmp_path)
    yield u
    u.close()


def test_fault_run(password_redis, timeline_upstream, catalog, proxies, tmp_path,
                   record_property):
    catalog.plan("faultrun", "--rate", "100000/min", "--concurrency", str(N))
    _, key = catalog.user_key("faultrun")
    rd, up = password_redis, timeline_upstream
    old, new = rd.password, "fr-new-" + secrets.token_hex(8)
    load = poller = None
    try:
        a, b = fleet(proxies, catalog, rd, up, n=2, proxy={"workers": 2},
                     limits={"lease_ttl_ms": LEASE_TTL_MS})
        by_via = {"a": a, "b": b}
        poller = HealthPoller(by_via).start()
        assert poller.wait_for(lambda s: s[2] == "ok", 10 * SLOW, since=time.monotonic()), \
            "the proxies' /health never said the store is ok"
        load = Load({"a": a.port, "b": b.port}, key).start()
        t_load = time.monotonic()
        run = Run(rd, by_via, load, poller, old, new)
        fs = faults()
        run.run(fs, t_load + WARMUP_S)
        stuck = load.stop()
        poller.stop()
        assert not stuck, "%d load threads did not stop" % len(stuck)
        events = up.timeline()["events"]
    finally:
        if load:
            load.stop()
        if poller:
            poller.stop()

    lines, fails = [], []
    base = in_flight_at_arrivals(events, t_load + 0.5, fs[0].start)
    lines.append("N=%d, 2 proxies x %s workers; before the first fault: %d admitted, max "
                 "fleet-wide %d" % (N, a.ini["proxy"]["workers"], len(base), most(base)))
    if over(base, t_load):
        fails.append("past N=%d fleet-wide before any fault: %s" % (N, over(base, t_load)))
    for f in fs:
        ls, fl = check_fault(f, events, run, sorted(by_via))
        lines += ls
        fails += fl
    for via, p in sorted(by_via.items()):
        err = p.stderr()
        if old in err or new in err:
            fails.append("proxy %s wrote a Redis password on stderr" % via)
    report(tmp_path, record_property, lines, events, fs, run)
    assert not fails, "\n".join(fails) + "\n\n" + "\n".join(lines)
