"""Shadow mode per plan (`tierctl plan set NAME --shadow on|off`): limits are counted,
the RateLimit headers, the access log, the warning log and /metrics say what would have
happened, and nothing is rejected: not over a rate limit, not over a concurrency limit,
not a WebSocket over its connection or message limit. Switching shadow off enforces the
counts already made, within refresh_ms, without a restart."""
import json

from conftest import assert_json_error, parse_sf_list, wait_until
from fault_helpers import metric
from fleet_helpers import OP_CLOSE, OP_TEXT, WS, parallel_requests, parse_close, ws_try, ws_upstream  # noqa: F401


def status_of(ln):
    return ln.get("status")


def ietf_item(r, field, name):
    """The parameters of item `name` of r's ietf RateLimit-Policy or RateLimit field."""
    return dict(parse_sf_list(r.header(field) or "")).get(name, {})


def test_shadow_reports_what_would_have_happened(catalog, start_proxy):
    catalog.plan("sh", "--rate", "3/min", "--shadow", "on")
    user, key = catalog.user_key("sh")
    p = start_proxy(catalog)
    rs = [p.get("/shadow/%d" % i, key=key) for i in range(6)]
    # nothing rejected: every request reached the upstream and its answer came back
    for i, r in enumerate(rs):
        assert r.status == 200 and r.echo["path"] == "/shadow/%d" % i, r
        assert r.header("Retry-After") is None, r
    # the headers: what the limit would have said
    assert [ietf_item(r, "RateLimit-Policy", "sh-1min").get("q") for r in rs] == [3] * 6, rs
    assert [ietf_item(r, "RateLimit", "sh-1min").get("r") for r in rs] == [2, 1, 0, 0, 0, 0], \
        [r.header("RateLimit") for r in rs]
    for r in rs[3:]:
        assert 1 <= ietf_item(r, "RateLimit", "sh-1min")["t"] <= 60, r
    # the access log: three allowed, three that would have been rejected
    lines = wait_until(lambda: len(p.access_log_lines()) >= 6 and p.access_log_lines(), 5)
    assert lines and len(lines) == 6, p.access_log_lines()
    assert sorted(ln.get("decision") for ln in lines) == ["allowed"] * 3 + ["shadow"] * 3, lines
    for ln in lines:
        assert status_of(ln) == 200, ln
        if ln.get("decision") == "shadow":
            assert ln.get("user_id") == user and ln.get("limit_type") == "http", ln
            assert ln.get("limit") == 3 and ln.get("current_count") == 3, ln
    # the warning log names the user and the limit of the would-be rejections: one line
    # for the three, which all came within 10 s
    warns = [json.loads(ln) for ln in p.stderr().splitlines()
             if ln.startswith("{") and "limit exceeded" in ln]
    assert len(warns) == 1 and warns[0].get("user_id") == user, p.stderr()[-2000:]
    # the metrics: three hits counted, no 429 answered
    assert metric(p, "tierproxy_rate_limit_hits_total", limit_type="http", plan="sh") == 3
    assert metric(p, "tierproxy_requests_total", plan="sh", code="200") == 6
    assert metric(p, "tierproxy_requests_total", plan="sh", code="429") == 0


def test_shadow_off_enforces_what_was_counted_and_on_again(catalog, start_proxy):
    catalog.plan("sh", "--rate", "3/min", "--shadow", "on")
    _, key = catalog.user_key("sh")
    p = start_proxy(catalog, plans={"refresh_ms": 200})
    assert [p.get("/a", key=key).status for _ in range(4)] == [200] * 4
    catalog.run("plan", "set", "sh", "--shadow", "off")
    r = wait_until(lambda: (lambda r: r if r.status == 429 else None)(p.get("/b", key=key)), 3,
                   interval=0.1)
    assert r, "shadow off did not take effect within 3 s (refresh_ms = 200)"
    body = assert_json_error(r, 429)
    assert body["error_code"] == "rate_limit_exceeded", body
    assert 1 <= int(r.header("Retry-After")) <= 60, r
    assert ietf_item(r, "RateLimit", "sh-1min").get("r") == 0, r
    catalog.run("plan", "set", "sh", "--shadow", "on")
    assert wait_until(lambda: p.get("/c", key=key).status == 200, 3, interval=0.1), \
        "shadow on again did not take effect within 3 s"
    # the limit itself was not changed by switching shadow
    shown = json.loads(catalog.run("plan", "show", "sh", "--json").stdout)
    assert shown["shadow"] is True
    assert [(l["kind"], l["amount"]) for l in shown["limits"]] == [("rate", 3)], shown


def test_shadow_concurrency_forwards_all_and_leaks_no_slot(catalog, start_proxy):
    catalog.plan("shc", "--rate", "100000/min", "--concurrency", "1", "--shadow", "on")
    _, key = catalog.user_key("shc")
    p = start_proxy(catalog, plans={"refresh_ms": 200})
    rs = parallel_requests([(p.port, "GET", "/slow/400?i=%d" % i, key) for i in range(3)])
    assert [r.status for r in rs] == [200, 200, 200], rs
    assert metric(p, "tierproxy_rate_limit_hits_total", limit_type="concurrency",
                  plan="shc") == 2
    lines = wait_until(lambda: len(p.access_log_lines()) >= 3 and p.access_log_lines(), 5)
    shadow = [ln for ln in lines if ln.get("decision") == "shadow"]
    assert len(shadow) == 2 and all(ln.get("limit_type") == "concurrency" for ln in shadow), \
        lines
    # enforcing now: exactly one at a time, so the shadowed requests gave back no slot
    # they never held (a count below zero would let two through)
    catalog.run("plan", "set", "shc", "--shadow", "off")

    def enforced():
        rs = parallel_requests([(p.port, "GET", "/slow/300?j=%d" % i, key) for i in range(3)])
        return sorted(r.status for r in rs) == [200, 429, 429] and rs
    rs = wait_until(enforced, 4, interval=0.2)
    assert rs, "after shadow off, 3 parallel requests with concurrency 1 were not [200, 429, 429]"
    for i in range(3):      # and the slot comes back each time
        assert p.get("/seq/%d" % i, key=key).status == 200


def test_shadow_websocket_not_refused_nor_closed(catalog, proxies, ws_upstream):
    catalog.plan("shws", "--rate", "100000/min", "--concurrency", "1", "--ws-messages",
                 "2/min", "--shadow", "on")
    _, key = catalog.user_key("shws")
    p = proxies.start(catalog, upstream=ws_upstream)
    a = ws_try(p.port, "/ws", key)
    b = ws_try(p.port, "/ws", key)         # over the concurrency limit: would be 429
    try:
        assert isinstance(a, WS), a
        assert isinstance(b, WS), "second WebSocket refused in shadow mode: %r" % (b,)
        got = []
        for i in range(5):                  # over the message limit from the third on
            try:
                a.send_text("m%d" % i)
                a.sock.settimeout(3)
                op, payload = a.recv_message()
            except (OSError, ConnectionError) as e:
                got.append(("connection lost", repr(e)))
                break
            if op == OP_CLOSE:
                got.append(("closed", parse_close(payload)))
                break
            got.append((op, payload))
        assert got == [(OP_TEXT, b"m%d" % i) for i in range(5)], \
            "messages over the limit in shadow mode: %r" % got
    finally:
        for w in (a, b):
            if isinstance(w, WS):
                w.close()
    assert metric(p, "tierproxy_rate_limit_hits_total", limit_type="ws_connection",
                  plan="shws") == 1
    assert metric(p, "tierproxy_rate_limit_hits_total", limit_type="ws_message",
                  plan="shws") == 3
