"""Browser WebSockets (SPEC "Clients as they are"), without a browser: page script cannot
set Authorization on `new WebSocket()`, so the key may come in the query parameter
[auth] key_query (any request) or as an offered subprotocol `tierproxy.key.KEY`; neither
reaches the upstream or a log. With [auth] ws_refusal = close, a refused handshake gets the
proxy's own 101 and a close code (4401, 4429 "retry after S", 4503) that script can read.
test_browser.py drives the same through a real Chromium."""
import json
import re

import pytest

from conftest import SLOW, free_port, raw_exchange, wait_until
from fleet_helpers import (OP_TEXT, WS, HandshakeRefused, ws_connect,
                           ws_upstream)  # noqa: F401


def start(proxies, catalog, ws_upstream, auth=None, **kw):
    return proxies.start(catalog, upstream=ws_upstream, store="memory", auth=dict(auth or {}), **kw)


def user_key(catalog, plan="wsauth", *flags):
    if plan not in catalog.run("plan", "list").stdout:
        catalog.plan(plan, "--rate", "100000/min", *flags)
    return catalog.user_key(plan)


def handshake(port, target="/ws", protocols=None, headers=(), key=None):
    """A WS on 101, else the refusal's Resp. protocols: Sec-WebSocket-Protocol values, one
    field each."""
    hs = list(headers) + [("Sec-WebSocket-Protocol", v) for v in (protocols or [])]
    try:
        return ws_connect(port, target, key=key, headers=hs, timeout=10 * SLOW)
    except HandshakeRefused as e:
        return e.resp


def opened(r):
    assert isinstance(r, WS), "the handshake was refused: %r" % r
    return r


def refused(r, status, error_code):
    assert not isinstance(r, WS), "the handshake got 101, expected %d %s" % (status, error_code)
    assert r.status == status, "expected %d, got %r" % (status, r)
    assert json.loads(r.body).get("error_code") == error_code, r
    return r


def echo(ws, text="hello"):
    ws.send_text(text)
    assert ws.recv_message() == (OP_TEXT, text.encode())


def upstream_requests(ws_upstream):
    return ws_upstream.stats()["requests"]


def header(headers, name):
    values = [v for k, v in headers if k.lower() == name.lower()]
    return values


def access_lines(p):
    wait_until(lambda: p.access_log_lines(), 5 * SLOW)
    return p.access_log_lines()


def assert_key_nowhere(p, ws_upstream, *keys):
    """No key in what the upstream received, in the proxy's stderr or in its access log."""
    seen = json.dumps(upstream_requests(ws_upstream))
    log = open(p.access_log).read() if p.access_log else ""
    for key in keys:
        assert key not in seen, "the key reached the upstream: %s" % seen[:2000]
        assert key not in p.stderr(), "the key is in the proxy's stderr"
        assert key not in log, "the key is in the access log:\n%s" % log[-2000:]


# --------------------------------------------------------------------------------------
# [auth] key_query


def test_key_query_authenticates_a_handshake_and_is_taken_out(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream, {"key_query": "api_key"})
    ws = opened(handshake(p.port, "/ws/room?room=7&api_key=%s&x" % key))
    try:
        echo(ws)
    finally:
        ws.close()
    got = upstream_requests(ws_upstream)[-1]
    assert got["target"] == "/ws/room?room=7&x", got
    assert header(got["headers"], "X-Tier-User") == [user]
    assert wait_until(lambda: any(ln.get("status") == 101 for ln in p.access_log_lines()), 5 * SLOW)
    line = [ln for ln in access_lines(p) if ln.get("status") == 101][-1]
    assert line["path"] == "/ws/room?room=7&x" and line["user"] == user, line
    assert_key_nowhere(p, ws_upstream, key)


def test_key_query_on_any_request(catalog, proxies, ws_upstream):
    # EventSource and <img> cannot set headers either: the parameter is read on every request
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream, {"key_query": "api_key"})
    r = p.get("/plain?api_key=%s" % key)
    assert r.status == 200, r
    assert json.loads(r.body)["path"] == "/plain"
    r = p.get("/plain?a=1&api_key=%s&b=%%26" % key)
    assert r.status == 200, r
    assert json.loads(r.body)["path"] == "/plain?a=1&b=%26"
    # a page whose address carries the key names it in the Referer of what it loads
    r = p.get("/plain", headers=[("Referer", "%s/page?api_key=%s&c=3" % (p.url, key))], key=key)
    assert r.status == 200, r
    assert header(json.loads(r.body)["headers"], "Referer") == ["%s/page?c=3" % p.url]
    # a line is written once its answer is out: wait for the third
    assert wait_until(lambda: len(p.access_log_lines()) >= 3, 5 * SLOW)
    paths = [ln["path"] for ln in access_lines(p)]
    assert paths == ["/plain", "/plain?a=1&b=%26", "/plain"], paths
    assert_key_nowhere(p, ws_upstream, key)


def test_key_query_read_as_the_upstream_reads_it(catalog, proxies, ws_upstream):
    # percent-encoded names and values are the same parameter to the upstream's framework:
    # the proxy reads them decoded, and takes them out however they are spelled
    user, key = user_key(catalog)
    _, other = user_key(catalog)
    p = start(proxies, catalog, ws_upstream, {"key_query": "api_key"})
    spelled = "%" + key[0].encode().hex() + key[1:]
    for query in ("api%5Fkey=" + spelled, "api_key=%s&api_key=%s" % (key, key), "api_key=&api_key=" + key):
        r = p.get("/plain?" + query + "&z=1")
        assert r.status == 200, (query, r)
        assert json.loads(r.body)["path"] == "/plain?z=1", (query, r.body)
    # two different keys: the proxy does not guess which the client meant
    r = p.get("/plain?api_key=%s&api_key=%s" % (key, other))
    assert r.status == 401 and json.loads(r.body)["error_code"] == "invalid_api_key", r
    r = p.get("/plain?api_key=")
    assert r.status == 401 and json.loads(r.body)["error_code"] == "missing_api_key", r
    assert_key_nowhere(p, ws_upstream, key, other, spelled)


def test_key_in_query_and_header_must_agree(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    _, other = user_key(catalog)
    p = start(proxies, catalog, ws_upstream, {"key_query": "api_key"})
    r = p.get("/plain?api_key=" + key, key=key)
    assert r.status == 200, r
    r = p.get("/plain?api_key=" + other, key=key)
    assert r.status == 401 and json.loads(r.body)["error_code"] == "invalid_api_key", r
    refused(handshake(p.port, "/ws?api_key=" + other, key=key), 401, "invalid_api_key")
    assert_key_nowhere(p, ws_upstream, other)


def test_refused_head_logs_no_key(catalog, proxies, ws_upstream):
    # a head refused before it is parsed (a NUL in a field) is logged with its path: without
    # the key's parameter
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream, {"key_query": "api_key"})
    raw = raw_exchange(p.port, b"GET /plain?api_key=" + key.encode() + b"&q=1 HTTP/1.1\r\n"
                       b"Host: x\r\nX-Bad: a\x00b\r\n\r\n")
    assert raw.startswith(b"HTTP/1.1 400"), raw[:200]
    assert wait_until(lambda: p.access_log_lines(), 5 * SLOW)
    assert access_lines(p)[-1]["path"] == "/plain?q=1", access_lines(p)
    assert_key_nowhere(p, ws_upstream, key)


# --------------------------------------------------------------------------------------
# the key as an offered subprotocol


def test_subprotocol_key_authenticates_and_tierproxy_is_selected(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream)
    ws = opened(handshake(p.port, "/ws", ["tierproxy, tierproxy.key.%s, chat" % key]))
    try:
        # the upstream selected none; a browser that offered subprotocols needs one selected
        assert ws.resp.header_all("Sec-WebSocket-Protocol") == ["tierproxy"], ws.resp
        echo(ws)
    finally:
        ws.close()
    got = upstream_requests(ws_upstream)[-1]
    assert header(got["headers"], "Sec-WebSocket-Protocol") == ["chat"], got
    assert header(got["headers"], "X-Tier-User") == [user]
    assert_key_nowhere(p, ws_upstream, key)


def test_subprotocol_the_upstreams_selection_passes(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream)
    # odd whitespace, empty elements and two fields are one list (RFC 9110 5.6.1)
    ws = opened(handshake(p.port, "/ws/proto", [" ,tierproxy.key.%s ,\t chat ,," % key, "TierProxy,superchat"]))
    try:
        assert ws.resp.header_all("Sec-WebSocket-Protocol") == ["chat"], ws.resp
        echo(ws)
    finally:
        ws.close()
    got = upstream_requests(ws_upstream)[-1]
    assert header(got["headers"], "Sec-WebSocket-Protocol") == ["chat, superchat"], got
    # the marker alone, as the client spelled it, when the upstream selects none
    ws = opened(handshake(p.port, "/ws", ["TierProxy", "tierproxy.key." + key]))
    try:
        assert ws.resp.header_all("Sec-WebSocket-Protocol") == ["TierProxy"], ws.resp
    finally:
        ws.close()
    got = upstream_requests(ws_upstream)[-1]
    assert header(got["headers"], "Sec-WebSocket-Protocol") == [], got
    assert_key_nowhere(p, ws_upstream, key)


def test_subprotocol_key_alone(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream)
    ws = opened(handshake(p.port, "/ws", ["tierproxy.key." + key]))
    try:
        assert ws.resp.header_all("Sec-WebSocket-Protocol") == [], ws.resp
        echo(ws)
    finally:
        ws.close()
    got = upstream_requests(ws_upstream)[-1]
    assert header(got["headers"], "Sec-WebSocket-Protocol") == [], got
    assert_key_nowhere(p, ws_upstream, key)


def test_subprotocol_empty_or_conflicting_keys(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    _, other = user_key(catalog)
    p = start(proxies, catalog, ws_upstream, {"key_query": "api_key"})
    before = len(upstream_requests(ws_upstream))
    refused(handshake(p.port, "/ws", ["tierproxy, tierproxy.key."]), 401, "missing_api_key")
    refused(handshake(p.port, "/ws", ["tierproxy.key.%s, tierproxy.key.%s" % (key, other)]), 401,
            "invalid_api_key")
    refused(handshake(p.port, "/ws", ["tierproxy.key." + other], key=key), 401, "invalid_api_key")
    refused(handshake(p.port, "/ws?api_key=" + key, ["tierproxy.key." + other]), 401, "invalid_api_key")
    assert len(upstream_requests(ws_upstream)) == before, "a refused handshake reached the upstream"
    # the same key in every place is one key
    ws = opened(handshake(p.port, "/ws?api_key=" + key, ["tierproxy.key." + key], key=key))
    ws.close()
    assert_key_nowhere(p, ws_upstream, key, other)


def test_subprotocol_key_on_a_plain_request_is_removed_not_read(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    _, other = user_key(catalog)
    p = start(proxies, catalog, ws_upstream)
    r = p.get("/plain", headers=[("Sec-WebSocket-Protocol", "tierproxy.key." + key)])
    assert r.status == 401, r
    r = p.get("/plain", key=other, headers=[("Sec-WebSocket-Protocol", "tierproxy.key." + key)])
    assert r.status == 200, r
    assert header(json.loads(r.body)["headers"], "Sec-WebSocket-Protocol") == []
    assert_key_nowhere(p, ws_upstream, key)


# --------------------------------------------------------------------------------------
# [auth] ws_refusal = close


def closed_with(r):
    """The handshake got the proxy's 101: the close frame it sent at once, (code, reason);
    the close is answered, and the proxy then ends the connection."""
    ws = opened(r)
    try:
        code, reason = ws.recv_close()
        ws.send_close(code)
        assert ws.wait_eof(5 * SLOW), "the proxy kept the refused connection open"
        return code, reason.decode()
    finally:
        ws.close()


def test_ws_refusal_close_codes(catalog, proxies, ws_upstream):
    catalog.plan("once", "--rate", "1/min")
    user, key = catalog.user_key("once")
    p = start(proxies, catalog, ws_upstream, {"ws_refusal": "close"})
    before = len(upstream_requests(ws_upstream))
    assert closed_with(handshake(p.port, "/ws", ["tierproxy"])) == (4401, "missing_api_key")
    r = handshake(p.port, "/ws", ["tierproxy", "tierproxy.key.tp_nosuchkey"])
    assert r.resp.header_all("Sec-WebSocket-Protocol") == ["tierproxy"], r.resp
    assert closed_with(r) == (4401, "invalid_api_key")
    assert len(upstream_requests(ws_upstream)) == before, "a refused handshake reached the upstream"
    ws = opened(handshake(p.port, "/ws", key=key))
    ws.close()
    # a tunnel is logged when it ends; wait for that so the log's order is the test's
    assert wait_until(lambda: len(p.access_log_lines()) >= 3, 5 * SLOW)
    code, reason = closed_with(handshake(p.port, "/ws", key=key))
    assert code == 4429, (code, reason)
    m = re.fullmatch(r"retry after (\d+)", reason)
    assert m and 1 <= int(m.group(1)) <= 60, reason
    assert len(upstream_requests(ws_upstream)) == before + 1
    # logged as the refusals they stand for
    assert wait_until(lambda: len(p.access_log_lines()) >= 4, 5 * SLOW)
    got = [(ln["status"], ln["decision"]) for ln in access_lines(p)]
    # a line is written when its connection ends, and two workers end them in either order
    assert sorted(got[:3]) == [(101, "allowed"), (401, "invalid_key"), (401, "missing_key")], got
    assert got[3:] == [(429, "rejected")], got


def test_ws_refusal_close_4503_when_the_store_fails_closed(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    class Unreachable:
        url = "redis://127.0.0.1:%d/0" % free_port()
    p = proxies.start(catalog, upstream=ws_upstream, store="redis", redis=Unreachable,
                      limits={"on_store_error": "closed", "concurrency_on_store_error": "closed"},
                      auth={"ws_refusal": "close"})
    code, reason = closed_with(handshake(p.port, "/ws", key=key))
    assert (code, reason) == (4503, "unavailable")


def test_ws_refusal_status_by_default_and_upstream_refusals_unchanged(catalog, proxies, ws_upstream):
    user, key = user_key(catalog)
    p = start(proxies, catalog, ws_upstream)
    refused(handshake(p.port, "/ws"), 401, "missing_api_key")
    q = start(proxies, catalog, ws_upstream, {"ws_refusal": "close"})
    # the upstream's own refusal is its answer, passed on as it is
    r = handshake(q.port, "/refuse/429", key=key)
    assert not isinstance(r, WS) and r.status == 429, r
    assert json.loads(r.body) == {"refused_by": "upstream"}
    # a handshake that cannot be completed keeps its status: no Sec-WebSocket-Key, HTTP/1.0
    # (which libmicrohttpd never upgrades)
    upgrade = b"Host: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
    for head in (b"GET /ws HTTP/1.1\r\n" + upgrade,
                 b"GET /ws HTTP/1.0\r\n" + upgrade + b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"):
        raw = raw_exchange(q.port, head + b"\r\n")
        assert raw.startswith(b"HTTP/1.1 401") and b"missing_api_key" in raw, (head, raw[:300])


@pytest.mark.parametrize("key,value,ok", [
    ("key_query", "api_key", True), ("key_query", "", True), ("key_query", "?api_key", False),
    ("key_query", "api key", False), ("ws_refusal", "close", True), ("ws_refusal", "status", True),
    ("ws_refusal", "maybe", False),
])
def test_the_keys_are_checked(proxies, catalog, tmp_path, key, value, ok):
    from test_config import config_with, run_check

    def edit(ini):
        ini["auth"][key] = value
    path = config_with(proxies, catalog, tmp_path, "auth.ini", edit)
    cp, out = run_check(path)
    assert cp.returncode == (0 if ok else 1), out
    if not ok:
        assert key in out and value in out and "auth.ini:" in out, out
