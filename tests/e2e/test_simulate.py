"""`tierctl simulate LOG`: replays a tierproxy access log against the limits of the catalog
(or of --plan NAME, or of the LIMIT-FLAGS given) with the memory store's own algorithm
code, and says which requests and users would have been rejected. It changes nothing.

The first test holds the replay to the proxy itself: traffic at a steady pace through a
proxy until its limits bite, then the log that proxy wrote is replayed, and the requests
the replay rejects must be exactly the ones the proxy answered 429. The others build small
logs by hand to pin down what is counted, the output, and bad input."""
import datetime
import hashlib
import json
import pathlib
import socket
import subprocess
import time

import pytest

from conftest import TIERCTL_BIN, Client, _clean_env, parse_raw_response, read_answer, wait_until


def tierctl(*args, db=None, rc=0):
    cmd = [TIERCTL_BIN] + (["--db", str(db)] if db else []) + [str(a) for a in args]
    cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_clean_env(),
                        stdin=subprocess.DEVNULL)
    assert cp.returncode == rc, "%s: exit %d, wanted %d\nstdout: %s\nstderr: %s" % (
        " ".join(cmd), cp.returncode, rc, cp.stdout, cp.stderr)
    return cp


def simulate_json(log, *args, db=None):
    cp = tierctl("simulate", log, "--json", *args, db=db)
    return json.loads(cp.stdout)


def read_log_lines(path):
    """(line number, parsed object) for each complete line of an access log."""
    text = pathlib.Path(path).read_text()
    return [(i, json.loads(ln)) for i, ln in enumerate(text.splitlines(), 1) if ln.strip()]


# --------------------------------------------------------------------------------------
# the replay agrees with the proxy

@pytest.mark.parametrize("store", ["memory", "redis"])
def test_replay_rejects_exactly_the_requests_the_proxy_rejected(catalog, proxies, store):
    # A plan-wide window, a stricter route limit, and a token bucket on another plan, so
    # that requests are rejected by different rules and some are allowed between them.
    catalog.plan("steady", "--rate", "5/2s")
    catalog.limit("steady", "--rate", "2/s", "--route", "GET /search")
    catalog.plan("bucket", "--rate", "4/s", "--algorithm", "token-bucket", "--burst", "2")
    users = [catalog.user_key("steady"), catalog.user_key("steady"), catalog.user_key("bucket")]
    p = proxies.start(catalog, store=store, proxy={"exempt_paths": "/public"})
    clients = [Client(p.port) for _ in users]
    paths = ["/search/a?q=1", "/items/1", "/search/b", "/items/2?x=y", "/search/../items/3"]
    # One request per user every 70 ms, each user on its own keep-alive connection: a
    # user's requests never share a millisecond, and the limits bite within a second.
    pace = 0.07
    start = time.monotonic()
    statuses = []
    for i in range(45):
        for k, ((user, key), client) in enumerate(zip(users, clients)):
            r = client.get(paths[(i + k) % len(paths)], key=key)
            statuses.append(r.status)
        if i % 9 == 0:
            # not sent to the limiter: must not count
            assert clients[0].get("/items/x").status == 401
            assert clients[0].get("/public/page", key=users[0][1]).status == 200
        delay = start + (i + 1) * pace - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    for c in clients:
        c.close()
    assert statuses.count(429) >= 20 and statuses.count(200) >= 20, statuses

    expected = 45 * len(users) + 2 * 5
    assert wait_until(lambda: len(p.access_log_lines()) >= expected, 10), len(p.access_log_lines())
    lines = read_log_lines(p.access_log)
    assert len(lines) == expected
    logged_429 = sorted(n for n, ln in lines if ln["status"] == 429)

    report = simulate_json(p.access_log, db=catalog.path)
    assert sorted(report["rejected_lines"]) == logged_429, (report, logged_429)
    assert report["rejected"] == len(logged_429)
    assert report["requests"] == 45 * len(users)
    assert report["not_checked"] == 10
    assert report["skipped"] == 0
    assert report["logged_rejected"] == len(logged_429)
    assert report["newly_rejected"] == 0 and report["no_longer_rejected"] == 0
    assert report["users"] == 3
    by_user = {u["user"]: u for u in report["top_users"]}
    for user, _ in users:
        mine = [n for n, ln in lines if ln.get("user") == user and ln["status"] == 429]
        assert by_user[user]["rejected"] == len(mine), (user, report["top_users"])
        assert by_user[user]["requests"] == 45


def test_replay_checks_each_request_when_the_proxy_checked_it(catalog, proxies):
    # The proxy checks an upload once its body is in, which may be long after the request
    # began and long before it ends: the replay must use the time of the check. Here an
    # upload begins, a GET is checked 0.3 s later, and the upload's body comes 1.2 s after
    # that. Replayed at the upload's start (time - total_ms), the GET would meet the
    # upload inside 1/s; the proxy let both through.
    catalog.plan("one", "--rate", "1/s")
    user, key = catalog.user_key("one")
    p = proxies.start(catalog, store="memory")
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(b"POST /upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                  b"Content-Length: 5\r\n\r\n" % key.encode())
        time.sleep(0.3)
        p.get("/first", key=key)
        time.sleep(1.2)
        s.sendall(b"hello")
        parse_raw_response(read_answer(s, timeout=10))
    assert wait_until(lambda: len(p.access_log_lines()) >= 2, 10)
    lines = read_log_lines(p.access_log)
    assert len(lines) == 2
    report = simulate_json(p.access_log, db=catalog.path)
    assert report["requests"] == 2
    assert report["rejected_lines"] == sorted(n for n, ln in lines if ln["status"] == 429), (report, lines)


# --------------------------------------------------------------------------------------
# logs written by hand

BASE = datetime.datetime(2026, 11, 25, 12, 0, 0, tzinfo=datetime.timezone.utc)


def iso(ms):
    t = BASE + datetime.timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (t.microsecond // 1000)


def line(ms, user="alice", plan="free", path="/v1/items", method="GET", status=200,
         decision="allowed", total_ms=3, decided=True, client="10.0.0.1"):
    """One access-log line as the proxy writes it; the request was checked at `ms` (from
    BASE) and took total_ms. decided=False: a log without the decision time."""
    o = {"time": iso(ms + total_ms), "client": client, "method": method, "path": path,
         "status": status, "user": user, "plan": plan, "decision": decision}
    if decided and decision in ("allowed", "rejected", "shadow"):
        o["decision_time"] = iso(ms)
    o.update({"upstream_ms": 1 if status == 200 else None, "total_ms": total_ms, "bytes_sent": 10})
    return json.dumps(o, separators=(",", ":"))


def write_log(tmp_path, lines, name="access.log", tail=""):
    path = tmp_path / name
    path.write_text("".join(ln + "\n" for ln in lines) + tail)
    return path


def test_given_limits_say_which_requests_and_users_would_be_rejected(tmp_path):
    # alice: 4 requests within a second; bob: 2; carol: 1. Against 2/s: alice loses 2,
    # bob and carol nothing. Lines that never reached the limiter do not count.
    log = write_log(tmp_path, [
        line(0), line(100), line(200, user="bob"), line(300), line(400, user="bob"),
        line(500), line(600, user="carol"),
        line(700, user=None, plan=None, status=401, decision="unauthenticated"),
        line(800, user=None, plan=None, decision="exempt", path="/public"),
        line(1500),     # alice again, a second after her first two: allowed
    ])
    report = simulate_json(log, "--rate", "2/s")
    assert report["requests"] == 8
    assert report["not_checked"] == 2
    assert report["rejected"] == 2
    assert report["rejected_lines"] == [4, 6]
    assert report["users"] == 3 and report["users_rejected"] == 1
    assert report["top_users"][0] == {"user": "alice", "requests": 5, "rejected": 2}
    # the log rejected nothing, so both are newly rejected
    assert report["logged_rejected"] == 0 and report["newly_rejected"] == 2

    text = tierctl("simulate", log, "--rate", "2/s").stdout
    assert "2 of 8 requests" in text, text
    assert "1 of 3 users" in text, text
    assert "alice" in text.split("top users", 1)[1], text

    # a burst makes room for both
    assert simulate_json(log, "--rate", "2/s", "--burst", "2")["rejected"] == 0
    # a fixed window of a second: alice's 4 in [0, 1000) lose 2 as well
    assert simulate_json(log, "--rate", "2/s", "--algorithm", "fixed-window")["rejected"] == 2


def test_replay_follows_the_decision_time_not_the_log_order(tmp_path):
    # The proxy writes a line when a request ends: a slow request checked first comes
    # later in the log. 1/s: the slow one (checked at 0) is allowed, the fast one at 300
    # is rejected, although it is the first line.
    log = write_log(tmp_path, [line(300, total_ms=5), line(0, total_ms=900)])
    assert simulate_json(log, "--rate", "1/s")["rejected_lines"] == [1]
    # Without the decision time, the start of the request stands in (end - total_ms).
    log = write_log(tmp_path, [line(300, total_ms=5, decided=False), line(0, total_ms=900, decided=False)],
                    name="old.log")
    assert simulate_json(log, "--rate", "1/s")["rejected_lines"] == [1]


def test_concurrency_is_replayed_from_when_each_request_was_checked_until_it_ended(tmp_path):
    # Requests of alice, checked at..ended at: line 3 0..1000, line 1 100..400, line 2
    # 500..600, line 4 1000..1050. With one slot, lines 1 and 2 meet line 3 still running:
    # rejected; line 4 is checked when line 3 ends, and a request that ends gives its
    # slot back before one checked in the same millisecond. With two slots, line 2 comes
    # after line 1 ended: nothing is rejected.
    log = write_log(tmp_path, [
        line(100, total_ms=300), line(500, total_ms=100), line(0, total_ms=1000),
        line(1000, total_ms=50),
    ])
    report = simulate_json(log, "--concurrency", "1")
    assert sorted(report["rejected_lines"]) == [1, 2]
    assert simulate_json(log, "--concurrency", "2")["rejected_lines"] == []


def test_each_user_is_replayed_against_their_current_plan_or_the_plan_named(tmp_path, catalog):
    catalog.plan("tiny", "--rate", "1/min")
    catalog.limit("tiny", "--rate", "1/min", "--route", "POST /upload")
    catalog.plan("roomy", "--rate", "100/min")
    catalog.user("tiny", "alice")
    catalog.user("roomy", "bob")
    # The log says alice was on "free" then: her current plan ("tiny") is what counts.
    log = write_log(tmp_path, [
        line(0), line(1000), line(2000, method="POST", path="/upload/x"),
        line(3000, user="bob", plan="roomy"), line(4000, user="bob", plan="roomy"),
        line(5000, user="ghost", plan="roomy"), line(6000, user="ghost", plan="roomy"),
        line(7000, user="ghost2", plan="gone"),
    ])
    report = simulate_json(log, db=catalog.path)
    # alice: the second request is over 1/min; the third also over the route's 1/min
    # (its first) but over the plan-wide one: rejected. bob: fine. ghost (not in the
    # catalog any more) counts against the plan the log names; ghost2's plan is gone.
    assert report["rejected_lines"] == [2, 3]
    assert report["requests"] == 7 and report["no_plan"] == 1
    assert report["users"] == 3

    # --plan: everyone against one plan's limits
    report = simulate_json(log, "--plan", "tiny", db=catalog.path)
    assert report["rejected_lines"] == [2, 3, 5, 7]
    assert report["requests"] == 8 and report["users"] == 4 and report["users_rejected"] == 3
    # a route limit of that plan applies to the matching requests only
    catalog.run("plan", "set", "tiny", "--rate", "10/min")
    report = simulate_json(log, "--plan", "tiny", db=catalog.path)
    assert report["rejected_lines"] == []
    log2 = write_log(tmp_path, [line(0, method="POST", path="/upload/a"),
                                line(10, method="POST", path="/./upload//b?x=1"),
                                line(20, method="GET", path="/upload/c")], name="up.log")
    report = simulate_json(log2, "--plan", "tiny", db=catalog.path)
    assert report["rejected_lines"] == [2]

    tierctl("simulate", log, "--plan", "nosuch", db=catalog.path, rc=1)


def test_simulate_changes_nothing(tmp_path, catalog):
    catalog.plan("tiny", "--rate", "1/min")
    catalog.user("tiny", "alice")
    log = write_log(tmp_path, [line(0), line(10)])
    before = hashlib.sha256(catalog.path.read_bytes()).hexdigest()
    log_before = log.read_bytes()
    assert simulate_json(log, db=catalog.path)["rejected"] == 1
    tierctl("simulate", log, db=catalog.path)
    assert hashlib.sha256(catalog.path.read_bytes()).hexdigest() == before
    assert log.read_bytes() == log_before
    # with limits given, no catalog is needed at all
    assert simulate_json(log, "--rate", "1/min", db=tmp_path / "absent.db")["rejected"] == 1
    assert not (tmp_path / "absent.db").exists()


def test_a_partial_last_line_and_malformed_lines_are_skipped_and_named(tmp_path):
    # a rotated log cut mid-line, a line that is not JSON, a JSON line with no decision
    log = write_log(tmp_path, [line(0), "tierproxy: configuration ok", line(10),
                               json.dumps({"time": iso(20), "level": "warn"})],
                    tail=line(20)[:40])
    cp = tierctl("simulate", log, "--rate", "1/min", "--json")
    report = json.loads(cp.stdout)
    assert report["requests"] == 2 and report["rejected_lines"] == [3]
    assert report["skipped"] == 3 and report["lines"] == 5
    err = cp.stderr.splitlines()
    assert len(err) == 3, cp.stderr
    assert "%s:2:" % log in err[0] and "%s:4:" % log in err[1] and "%s:5:" % log in err[2], cp.stderr


def test_a_log_with_nothing_to_replay_is_refused(tmp_path):
    log = write_log(tmp_path, ["not json", "{}"])
    cp = tierctl("simulate", log, "--rate", "1/min", rc=1)
    assert "no access-log lines" in cp.stderr.splitlines()[-1], cp.stderr


def test_a_missing_log_exits_1_with_one_line(tmp_path):
    cp = tierctl("simulate", tmp_path / "nope.log", "--rate", "1/min", rc=1)
    assert cp.stdout == ""
    lines = cp.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tierctl: ") and "nope.log" in lines[0], cp.stderr


@pytest.mark.parametrize("args", [
    [],                                       # no LOG
    ["LOG", "--plan", "free", "--rate", "1/s"],   # a plan or limits, not both
    ["LOG", "--rate", "often"],
    ["LOG", "--burst", "3"],                  # a burst needs a rate
    ["LOG", "--ws-messages", "10/s"],         # not in an access log
    ["LOG", "--shadow", "on"],
    ["LOG", "--route", "GET /x", "--rate", "1/s"],
    ["LOG", "extra", "--rate", "1/s"],
])
def test_bad_flags_exit_2_with_usage(tmp_path, args):
    log = write_log(tmp_path, [line(0)])
    args = [str(log) if a == "LOG" else a for a in args]
    cp = tierctl("simulate", *args, rc=2)
    assert "usage: tierctl [--db PATH] simulate LOG" in cp.stderr, cp.stderr
    assert cp.stdout == ""


def test_help_lists_simulate():
    out = tierctl("--help").stdout
    assert "simulate LOG" in out, out
