"""SPEC "Beyond per-window rates": [proxy] upstream_max_inflight and plan priorities. A
request of priority P is forwarded while fewer than cap * (P + 1) / 10 requests are in
flight (compared exactly: in_flight * 10 < cap * (P + 1)) to the upstream (per proxy); otherwise 503 {"error_code":"upstream_saturated"} with
Retry-After: 1, before its body is read, counted per plan in
tierproxy_upstream_shed_total{plan}. The upstream never sees more than the cap."""
import subprocess
import threading
import time

import pytest

from conftest import TIERPROXY_BIN, TierctlError, _clean_env, assert_json_error, wait_until, write_ini
from fault_helpers import metric
from fleet_helpers import error_code, parallel_requests

UNLIMITED = ("--rate", "100000/min", "--concurrency", "1000")


def check_saturated(r):
    assert_json_error(r, 503, {"error_code": "upstream_saturated"})
    assert r.header("Retry-After") == "1", r


def test_default_priority_gets_six_tenths_of_the_cap(catalog, proxies, upstream_factory):
    """cap 20, a plan of the default priority 5: at most 20 * 6 / 10 = 12 in flight; 30
    requests at once to a slow upstream: 12 forwarded, 18 shed with 503
    upstream_saturated and Retry-After: 1, counted in the plan's metric."""
    up = upstream_factory()
    catalog.plan("mid", *UNLIMITED)
    key = catalog.user_key("mid")[1]
    p = proxies.start(catalog, upstream=up, proxy={"upstream_max_inflight": 20})
    rs = parallel_requests([(p.port, "GET", "/slow/1500", key)] * 30)
    got = [r.status if r is not None else None for r in rs]
    assert got.count(200) == 12, got
    assert got.count(503) == 18, got
    for r in rs:
        if r.status == 503:
            check_saturated(r)
    assert up.stats()["inflight_max"] <= 12, up.stats()
    assert metric(p, "tierproxy_upstream_shed_total", plan="mid") == 18
    logged = [ln for ln in p.access_log_lines() if ln.get("status") == 503]
    assert len(logged) == 18 and all(ln["decision"] == "shed" for ln in logged), logged[:3]
    # once the slow ones are done, the plan is forwarded again
    assert p.get("/after", key=key).status == 200


def test_shed_before_the_body_is_read(catalog, proxies, upstream_factory):
    """cap 1 (a priority-5 request goes while 0 * 10 < 1 * 6, so one at a time): while one
    request holds the place, the next is answered at head time: a client that sent only
    its head (and would send a 1 MiB body after 100 Continue) gets the 503 at once."""
    up = upstream_factory()
    catalog.plan("mid", *UNLIMITED)
    key = catalog.user_key("mid")[1]
    p = proxies.start(catalog, upstream=up, proxy={"upstream_max_inflight": 1})
    holder = threading.Thread(target=lambda: p.get("/slow/2000", key=key, timeout=30))
    holder.start()
    assert wait_until(lambda: up.stats()["inflight"] == 1, 5)
    t0 = time.monotonic()
    r = p.request("POST", "/upload", key=key, body=None,
                  headers=[("Content-Length", "1048576"), ("Expect", "100-continue")], timeout=10)
    took = time.monotonic() - t0
    check_saturated(r)
    assert took < 1.5, "the 503 waited for %.1fs" % took
    holder.join(30)
    assert up.stats()["requests"] == 1


def test_no_cap_by_default(catalog, proxies, upstream_factory):
    up = upstream_factory()
    catalog.plan("mid", *UNLIMITED)
    key = catalog.user_key("mid")[1]
    p = proxies.start(catalog, upstream=up)
    rs = parallel_requests([(p.port, "GET", "/slow/1000", key)] * 30)
    assert [r.status for r in rs].count(200) == 30, [r.status for r in rs]


def priority_plan(catalog, name, priority):
    try:
        catalog.plan(name, *UNLIMITED, "--priority", str(priority))
    except TierctlError as e:
        pytest.skip("this tierctl has no plan --priority (i13-tiers brings it): %s" % e)
    return catalog.user_key(name)[1]


def test_low_priority_shed_first(catalog, proxies, upstream_factory):
    """cap 20, a slow upstream, concurrent load from a priority-9 and a priority-0 plan:
    priority 9 sees no 503, priority 0 is shed with 503 upstream_saturated and
    Retry-After: 1, and the upstream never has more than 20 in flight."""
    up = upstream_factory()
    high = priority_plan(catalog, "gold", 9)
    low = priority_plan(catalog, "free0", 0)
    p = proxies.start(catalog, upstream=up, proxy={"upstream_max_inflight": 20})
    results = {"gold": [], "free0": []}
    lock = threading.Lock()
    stop = time.monotonic() + 4.0

    def load(plan, key):
        c = p.client(timeout=30)
        while time.monotonic() < stop:
            r = c.get("/slow/200", key=key)
            with lock:
                results[plan].append(r)
            if r.status == 503:
                c.close()
                c = p.client(timeout=30)
                time.sleep(0.02)
        c.close()

    threads = [threading.Thread(target=load, args=("gold", high)) for _ in range(16)]
    threads += [threading.Thread(target=load, args=("free0", low)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    gold = [r.status for r in results["gold"]]
    free = [r.status for r in results["free0"]]
    assert gold and set(gold) == {200}, sorted(set(gold))
    assert free.count(503) > 0, "priority 0 was never shed: %s" % sorted(set(free))
    for r in results["free0"]:
        if r.status == 503:
            check_saturated(r)
    assert up.stats()["inflight_max"] <= 20, up.stats()
    assert metric(p, "tierproxy_upstream_shed_total", plan="free0") == free.count(503)
    assert metric(p, "tierproxy_upstream_shed_total", plan="gold") == 0


def check_with(proxies, catalog, tmp_path, value):
    ini = proxies.config(catalog, store="memory")
    ini["proxy"]["upstream_max_inflight"] = value
    path = tmp_path / "cap.ini"
    write_ini(path, ini)
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(path), "--check"], capture_output=True, text=True,
                        timeout=60, env=_clean_env(), stdin=subprocess.DEVNULL)
    line = next(i for i, ln in enumerate(path.read_text().splitlines(), 1)
                if ln.startswith("upstream_max_inflight ="))
    return cp.returncode, cp.stdout + cp.stderr, "%s:%d" % (path, line)


@pytest.mark.parametrize("value", ["-1", "abc", "1.5", "", "99999999999999999999"])
def test_bad_upstream_max_inflight_names_file_line_key(proxies, catalog, tmp_path, value):
    rc, out, where = check_with(proxies, catalog, tmp_path, value)
    assert rc == 1, out
    assert where in out and "upstream_max_inflight" in out, out


@pytest.mark.parametrize("value", ["0", "20", "100000"])
def test_upstream_max_inflight_accepted(proxies, catalog, tmp_path, value):
    rc, out, _ = check_with(proxies, catalog, tmp_path, value)
    assert rc == 0, out
