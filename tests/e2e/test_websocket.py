"""WebSocket through tierproxy: authenticated and limited like any request, tunnelled after
the upstream's 101, frames unchanged both ways, close codes passed through, open connections
counted against the concurrency limit fleet-wide (leases on Redis that a killed proxy stops
renewing), --ws-messages closing with 1008, websocket_idle_timeout_ms closing with 1001."""
import hashlib
import os
import signal
import time


from conftest import SLOW, assert_json_error, wait_until
from fleet_helpers import (OP_BIN, OP_CLOSE, OP_CONT, OP_PING, OP_PONG, OP_TEXT, WS,
                           check_concurrency_429, fleet, parallel_ws, wait_stat, ws_connect,
                           ws_try, ws_upstream)  # noqa: F401


def ws_plan(catalog, name="wsplan", *flags):
    catalog.plan(name, "--rate", "100000/min", *flags)
    return catalog.user_key(name)


def open_on(port, key, want, deadline_s):
    """Keeps trying to open WebSockets on port until `want` are open or the deadline passes.
    Returns (the open WS list, seconds taken)."""
    t0 = time.monotonic()
    got = []
    while len(got) < want and time.monotonic() - t0 < deadline_s:
        r = ws_try(port, "/ws", key)
        if isinstance(r, WS):
            got.append(r)
        else:
            check_concurrency_429(r)
            time.sleep(0.05)
    return got, time.monotonic() - t0


def assert_echo(ws, text):
    ws.send_text(text)
    assert ws.recv_message() == (OP_TEXT, text.encode())


def close_all(wss):
    for w in wss:
        w.close()


# --------------------------------------------------------------------------------------
# the concurrency limit across a fleet


def test_20_parallel_limit_5_two_proxies_then_kill_9(catalog, proxies, redis, ws_upstream):
    user, key = ws_plan(catalog, "ws5", "--concurrency", "5")
    ttl_ms = 2000
    a, b = fleet(proxies, catalog, redis, ws_upstream, limits={"lease_ttl_ms": ttl_ms})
    res = parallel_ws([((a, b)[i % 2].port, "/ws", key) for i in range(20)])
    opened = [(i, r) for i, r in enumerate(res) if isinstance(r, WS)]
    refused = [r for r in res if not isinstance(r, WS)]
    got = []
    try:
        assert len(opened) == 5, "%d of 20 opened (limit 5): %r" % (len(opened), refused[:3])
        assert len(refused) == 15
        for r in refused:
            check_concurrency_429(r)
        assert wait_stat(ws_upstream, "ws_open", user, 5) == 5
        for i, w in opened:
            assert_echo(w, "hello %d" % i)
        on = {a: [w for i, w in opened if i % 2 == 0], b: [w for i, w in opened if i % 2 == 1]}
        victim = a if len(on[a]) >= len(on[b]) else b
        survivor = b if victim is a else a
        if not on[survivor]:
            # all 5 landed on one proxy: move two, so both proxies hold slots
            for w in on[victim][:2]:
                w.send_close(1000)
                w.recv_close()
            on[victim] = on[victim][2:]
            moved, _ = open_on(survivor.port, key, 2, 2 * SLOW)
            got += moved
            on[survivor] = moved
            assert len(moved) == 2, "closed slots did not come back"
        k = len(on[victim])
        assert k >= 1
        victim.proc.kill()
        t_kill = time.monotonic()
        victim.proc.wait(10)
        victim.expected_rc = -signal.SIGKILL
        # the survivor's tunnels are untouched
        for w in on[survivor]:
            assert_echo(w, "still here")
        # the dead proxy's k slots become free within lease_ttl_ms (+1 s), and no more
        back, _ = open_on(survivor.port, key, k, (ttl_ms + 1000) / 1000.0 * SLOW)
        took = time.monotonic() - t_kill
        got += back
        assert len(back) == k, "only %d of the %d slots of the killed proxy came back within " \
            "%.1fs (lease_ttl_ms %d)" % (len(back), k, took, ttl_ms)
        print("kill -9: the killed proxy's %d slots (survivor held %d) back %.2fs after the kill "
              "(lease_ttl_ms %d)" % (k, len(on[survivor]), took, ttl_ms))
        check_concurrency_429(ws_try(survivor.port, "/ws", key))
    finally:
        close_all([w for _, w in opened] + got)


def test_sigterm_gives_slots_back_at_once(catalog, proxies, redis, ws_upstream):
    user, key = ws_plan(catalog, "ws5", "--concurrency", "5")
    ttl_ms = 10000
    a, b = fleet(proxies, catalog, redis, ws_upstream, limits={"lease_ttl_ms": ttl_ms})
    on_a = [ws_connect(a.port, "/ws", key=key) for _ in range(3)]
    on_b = [ws_connect(b.port, "/ws", key=key) for _ in range(2)]
    extra = []
    try:
        check_concurrency_429(ws_try(b.port, "/ws", key))
        t0 = time.monotonic()
        a.signal(signal.SIGTERM)
        # A's clients see their tunnels end (close frame 1001 and/or EOF)
        for w in on_a:
            assert w.wait_eof(10 * SLOW), "a tunnel of the stopped proxy stayed open"
        extra, _ = open_on(b.port, key, 3, 1.5 * SLOW)
        took = time.monotonic() - t0
        assert len(extra) == 3, "only %d of 3 slots back %.1fs after SIGTERM (lease_ttl_ms %d)" \
            % (len(extra), took, ttl_ms)
        print("SIGTERM: 3 slots back %.2fs after the signal (lease_ttl_ms %d)" % (took, ttl_ms))
        check_concurrency_429(ws_try(b.port, "/ws", key))
        a.proc.wait(15 * SLOW)
        assert a.proc.returncode == 0, a.stderr()[-2000:]
    finally:
        close_all(on_a + on_b + extra)


def test_slot_back_when_either_side_closes(catalog, proxies, redis, ws_upstream):
    user, key = ws_plan(catalog, "ws1", "--concurrency", "1")
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    # 1. the client closes with a close frame
    w = ws_connect(a.port, "/ws", key=key)
    check_concurrency_429(ws_try(b.port, "/ws", key))
    w.send_close(1000)
    assert w.recv_close()[0] == 1000
    w.close()
    got, took = open_on(b.port, key, 1, 2 * SLOW)
    assert len(got) == 1, "slot not back after the client closed"
    # 2. the upstream closes
    w = got[0]
    check_concurrency_429(ws_try(a.port, "/ws", key))
    w.send_text("__close 4002")
    assert w.recv_close()[0] == 4002
    w.send_close(4002)
    got, took = open_on(a.port, key, 1, 2 * SLOW)
    w.close()
    assert len(got) == 1, "slot not back after the upstream closed"
    # 3. the client goes away without a close frame (TCP close mid-stream)
    w = got[0]
    w.send_binary(b"x" * 10)
    w.close()
    got, took = open_on(b.port, key, 1, 2 * SLOW)
    assert len(got) == 1, "slot not back after the client vanished"
    assert wait_stat(ws_upstream, "ws_open", user, 1) == 1, \
        "the proxy kept upstream tunnels of closed client connections"
    close_all(got)


def test_memory_store_counts_websockets_per_process(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "ws2", "--concurrency", "2")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    ws = [ws_connect(p.port, "/ws", key=key) for _ in range(2)]
    try:
        check_concurrency_429(ws_try(p.port, "/ws", key))
        # HTTP requests count against the same limit
        check_concurrency_429(p.get("/x", key=key))
        ws[0].send_close(1000)
        ws[0].recv_close()
        assert wait_until(lambda: p.get("/x", key=key).status == 200, 2 * SLOW, 0.05)
    finally:
        close_all(ws)


# --------------------------------------------------------------------------------------
# the tunnel


def test_handshake_authenticated_and_headers_rewritten(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "wsh")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    r = ws_try(p.port, "/ws")
    assert_json_error(r, 401, {"error_code": "missing_api_key"})
    r = ws_try(p.port, "/ws", key="tp_not_a_key")
    assert_json_error(r, 401, {"error_code": "invalid_api_key"})
    assert ws_upstream.stats()["ws_total"] == {}, "an unauthenticated upgrade reached upstream"
    w = ws_connect(p.port, "/ws/chat?room=1", key=key,
                   headers=[("X-Tier-User", "someone-else"), ("X-Tier-Plan", "pro")])
    try:
        assert w.resp.status == 101
        hs = ws_upstream.stats()["ws_handshakes"][-1]
        names = [k.lower() for k, _ in hs]
        assert "authorization" not in names, hs
        assert [v for k, v in hs if k.lower() == "x-tier-user"] == [user], hs
        assert [v for k, v in hs if k.lower() == "x-tier-plan"] == ["wsh"], hs
        assert any(k.lower() == "upgrade" and v.lower() == "websocket" for k, v in hs), hs
        assert any(k.lower() == "sec-websocket-key" for k, _ in hs), hs
        assert_echo(w, "ok")
    finally:
        w.close()


def test_echo_is_byte_exact(catalog, proxies, ws_upstream):
    _, key = ws_plan(catalog, "wse")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    w = ws_connect(p.port, "/echo", key=key)
    try:
        # text, binary, empty, and each payload length encoding (7-bit, 16-bit, 64-bit)
        w.send_text("héllo wörld ✓")
        assert w.recv_message() == (OP_TEXT, "héllo wörld ✓".encode())
        for n in (0, 1, 125, 126, 300, 65535, 65536, 200000):
            data = os.urandom(n)
            w.send_binary(data)
            assert w.recv_message() == (OP_BIN, data), "binary of %d bytes changed" % n
        # 1 MB binary and text messages, byte-exact
        big = os.urandom(1 << 20)
        w.send_binary(big)
        op, got = w.recv_message()
        assert op == OP_BIN and len(got) == len(big) and \
            hashlib.sha256(got).digest() == hashlib.sha256(big).digest(), "1 MB binary changed"
        bigt = ("0123456789abcdéf" * 70000)[:1 << 20].encode()
        w.send_text(bigt)
        assert w.recv_message() == (OP_TEXT, bigt), "1 MB text changed"
        # ping from the client: the upstream's pong comes back with the payload
        w.send_frame(OP_PING, b"are you there")
        assert w.recv_frame() == (True, OP_PONG, b"are you there")
        # a fragmented text message with a ping between its fragments: the frames come back
        # as sent (the upstream echoes frame by frame)
        w.send_frame(OP_TEXT, b"frag-one ", fin=False)
        w.send_frame(OP_PING, b"mid")
        w.send_frame(OP_CONT, b"frag-two ", fin=False)
        w.send_frame(OP_CONT, "frag-thrée".encode(), fin=True)
        frames = [w.recv_frame() for _ in range(4)]
        data = [f for f in frames if f[1] != OP_PONG]
        assert (True, OP_PONG, b"mid") in frames, frames
        assert data == [(False, OP_TEXT, b"frag-one "), (False, OP_CONT, b"frag-two "),
                        (True, OP_CONT, "frag-thrée".encode())], frames
        # a fragmented binary message of large pieces
        p1, p2 = os.urandom(70000), os.urandom(130)
        w.send_frame(OP_BIN, p1, fin=False)
        w.send_frame(OP_CONT, p2, fin=True)
        assert [w.recv_frame() for _ in range(2)] == [(False, OP_BIN, p1), (True, OP_CONT, p2)]
        # many small messages back to back, order kept
        msgs = [("m%d" % i).encode() for i in range(200)]
        w.sock.sendall(b"".join(__import__("fleet_helpers").encode_frame(OP_TEXT, m) for m in msgs))
        assert [w.recv_message()[1] for _ in msgs] == msgs
    finally:
        w.close()


def test_close_codes_pass_both_ways(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "wsc")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    # the client closes with 4001: the upstream sees 4001 and echoes it back
    w = ws_connect(p.port, "/ws", key=key)
    assert_echo(w, "before close")
    w.send_close(4001, b"client bye")
    assert w.recv_close() == (4001, b"client bye")
    assert w.wait_eof(5 * SLOW), "the proxy did not close the TCP connection after the close"
    w.close()
    assert wait_until(lambda: ws_upstream.stats()["ws_ended"], 3)
    end = ws_upstream.stats()["ws_ended"][-1]
    assert end["how"] == "close" and end["code"] == 4001 and end["reason"] == "client bye", end
    # the upstream closes with 4002: the client sees 4002, its answer reaches the upstream
    w = ws_connect(p.port, "/ws", key=key)
    w.send_text("__close 4002")
    assert w.recv_close() == (4002, b"upstream")
    w.send_close(4002, b"ack")
    assert w.wait_eof(5 * SLOW)
    w.close()
    assert wait_until(lambda: len(ws_upstream.stats()["ws_ended"]) == 2, 3)
    end = ws_upstream.stats()["ws_ended"][-1]
    assert end["how"] == "close-reply" and end["code"] == 4002 and end["reason"] == "ack", end


def test_ws_messages_limit_closes_with_1008(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "wsm", "--ws-messages", "5/min")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    w = ws_connect(p.port, "/ws", key=key)
    try:
        for i in range(5):
            assert_echo(w, "msg %d" % i)
        w.send_text("msg 5")
        op, payload = w.recv_message()
        assert op == OP_CLOSE, "6th message over 5/min was not refused: %r" % ((op, payload),)
        code = int.from_bytes(payload[:2], "big")
        assert code == 1008, "close code %d, expected 1008" % code
        w.send_close(1008)
        assert w.wait_eof(5 * SLOW)
        # the upstream never got the 6th message, and its side was closed
        assert wait_stat(ws_upstream, "ws_open", user, 0) == 0, "upstream side left open"
        assert ws_upstream.stat("ws_messages", user) == 5
    finally:
        w.close()
    # the limit is per connection: a new one has its own 5
    w = ws_connect(p.port, "/ws", key=key)
    try:
        for i in range(5):
            assert_echo(w, "again %d" % i)
        w.send_text("again 5")
        assert w.recv_close()[0] == 1008
    finally:
        w.close()


def test_ws_messages_fragmented_message_counts_once(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "wsf", "--ws-messages", "2/min")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    w = ws_connect(p.port, "/ws", key=key)
    try:
        # one message in three fragments, and control frames, are not three messages
        w.send_frame(OP_TEXT, b"a", fin=False)
        w.send_frame(OP_CONT, b"b", fin=False)
        w.send_frame(OP_CONT, b"c", fin=True)
        frames = [w.recv_frame() for _ in range(3)]
        assert [f[2] for f in frames] == [b"a", b"b", b"c"], frames
        w.send_frame(OP_PING, b"p")
        assert w.recv_frame() == (True, OP_PONG, b"p")
        assert_echo(w, "second")
        w.send_text("third")
        assert w.recv_close()[0] == 1008
    finally:
        w.close()


def test_idle_timeout_closes_with_1001(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "wsi", "--concurrency", "1")
    idle_ms = int(700 * SLOW)
    p = proxies.start(catalog, store="memory", upstream=ws_upstream,
                      proxy={"websocket_idle_timeout_ms": idle_ms})
    w = ws_connect(p.port, "/ws", key=key)
    try:
        # traffic keeps it open past the timeout
        t_end = time.monotonic() + 2 * idle_ms / 1000.0
        while True:
            assert_echo(w, "keepalive")
            t0 = time.monotonic()       # the last traffic
            if t0 >= t_end:
                break
            time.sleep(idle_ms / 3000.0)
        code, _ = w.recv_close()
        idle = time.monotonic() - t0
        assert code == 1001, code
        assert idle >= idle_ms / 1000.0 * 0.8, "closed after %.2fs idle (timeout %d ms)" % (idle, idle_ms)
        assert idle < idle_ms / 1000.0 + 2 * SLOW, idle
        w.send_close(1001)
        assert w.wait_eof(5 * SLOW)
    finally:
        w.close()
    assert wait_stat(ws_upstream, "ws_open", user, 0) == 0, "upstream side of the idle tunnel left open"
    got, _ = open_on(p.port, key, 1, 2 * SLOW)
    assert len(got) == 1, "the idle-closed tunnel's slot did not come back"
    close_all(got)


def test_websockets_outlive_the_lease_ttl(catalog, proxies, redis, ws_upstream):
    user, key = ws_plan(catalog, "ws2", "--concurrency", "2")
    ttl_ms = 800
    a, b = fleet(proxies, catalog, redis, ws_upstream, limits={"lease_ttl_ms": ttl_ms})
    ws = [ws_connect(a.port, "/ws", key=key), ws_connect(b.port, "/ws", key=key)]
    try:
        time.sleep(3 * ttl_ms / 1000.0)
        check_concurrency_429(ws_try(a.port, "/ws", key))
        check_concurrency_429(ws_try(b.port, "/ws", key))
        for w in ws:
            assert_echo(w, "alive")
    finally:
        close_all(ws)


def test_upstream_refuses_the_upgrade(catalog, proxies, ws_upstream):
    user, key = ws_plan(catalog, "wsr", "--concurrency", "1")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    for _ in range(3):
        r = ws_try(p.port, "/refuse/403", key)
        assert not isinstance(r, WS)
        assert r.status == 403 and r.body == b'{"refused_by":"upstream"}', r
    # the refused handshakes gave their slot back
    w = ws_connect(p.port, "/ws", key=key)
    assert_echo(w, "ok")
    w.close()


def test_upstream_unreachable_is_502_and_frees_the_slot(catalog, proxies):
    from conftest import free_port
    user, key = ws_plan(catalog, "wsd", "--concurrency", "1")
    p = proxies.start(catalog, store="memory", upstream="http://127.0.0.1:%d" % free_port())
    for _ in range(3):
        r = ws_try(p.port, "/ws", key)
        assert_json_error(r, 502, {"error_code": "upstream_unavailable"})


def test_upstream_first_frame_in_the_same_packet_as_its_101(catalog, proxies, ws_upstream):
    _, key = ws_plan(catalog, "wsg")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    # the upstream's 101 and its first frame in one write
    w = ws_connect(p.port, "/greet", key=key)
    try:
        assert w.recv_message() == (OP_TEXT, b"hello")
        assert_echo(w, "after greeting")
    finally:
        w.close()


def test_client_frames_in_the_same_packet_as_its_handshake(catalog, proxies, ws_upstream):
    """An eager client writes its first frames with the handshake, before the 101: they
    reach the upstream in order, and the tunnel goes on working."""
    _, key = ws_plan(catalog, "wsx")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    import socket
    from fleet_helpers import encode_frame, ws_finish, ws_handshake_bytes
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    early = [b"first", b"second", os.urandom(3000)]
    s.sendall(ws_handshake_bytes("/echo", key) +
              b"".join(encode_frame(OP_BIN if len(m) > 10 else OP_TEXT, m) for m in early))
    w = ws_finish(s)
    try:
        assert w.recv_message() == (OP_TEXT, b"first")
        assert w.recv_message() == (OP_TEXT, b"second")
        assert w.recv_message() == (OP_BIN, early[2])
        assert_echo(w, "after the early frames")
    finally:
        w.close()


def test_rate_limit_applies_to_handshakes(catalog, proxies, ws_upstream):
    catalog.plan("wsrate", "--rate", "2/min")
    _, key = catalog.user_key("wsrate")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream)
    ws = [ws_connect(p.port, "/ws", key=key) for _ in range(2)]
    try:
        r = ws_try(p.port, "/ws", key)
        assert not isinstance(r, WS)
        body = assert_json_error(r, 429)
        assert body["error_code"] == "rate_limit_exceeded", body
        assert int(r.header("Retry-After")) >= 1
    finally:
        close_all(ws)


def test_upstream_drops_the_connection(catalog, proxies, redis, ws_upstream):
    user, key = ws_plan(catalog, "ws1d", "--concurrency", "1")
    a, b = fleet(proxies, catalog, redis, ws_upstream)
    w = ws_connect(a.port, "/ws", key=key)
    try:
        w.send_text("__drop")        # the upstream closes TCP without a close frame
        assert w.wait_eof(5 * SLOW), "the client's side stayed open after the upstream dropped"
    finally:
        w.close()
    got, _ = open_on(b.port, key, 1, 2 * SLOW)
    assert len(got) == 1, "slot not back after the upstream dropped the tunnel"
    close_all(got)


def test_many_idle_websockets_on_one_worker(catalog, proxies, ws_upstream):
    """1100 idle WebSockets on one event loop (more than libmicrohttpd's default of
    FD_SETSIZE - 4 connections per daemon): all open, and the proxy still answers."""
    import socket
    n = 1100
    _, key = ws_plan(catalog, "wsmany")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream, proxy={"workers": 1})
    opened = []
    try:
        for start in range(0, n, 100):
            try:
                res = parallel_ws([(p.port, "/ws", key)] * min(100, n - start), timeout=5 * SLOW)
            except (socket.timeout, TimeoutError, ConnectionError) as e:
                raise AssertionError("a handshake went unanswered (%.0f s) while opening "
                                     "WebSockets %d..%d on one worker: %r"
                                     % (5 * SLOW, len(opened) + 1, len(opened) + 100, e))
            for r in res:
                assert isinstance(r, WS), "refused with %d open: %r" % (len(opened), r)
                opened.append(r)
        assert len(opened) == n
        r = p.get("/x", key=key, timeout=5 * SLOW)
        assert r.status == 200, r
        assert_echo(opened[0], "first")
        assert_echo(opened[-1], "last")
    finally:
        close_all(opened)


def test_tunnel_on_a_kept_alive_connection_after_empty_lines(catalog, proxies, ws_upstream):
    """A handshake that comes as a connection's second request, after a page's worth of
    empty lines (libmicrohttpd skips them, so its head is not at its buffer's start): the
    tunnel opens and echoes, and the proxy serves on."""
    import socket
    from conftest import read_answer
    from fleet_helpers import ws_finish, ws_handshake_bytes
    _, key = ws_plan(catalog, "wskept")
    p = proxies.start(catalog, upstream=ws_upstream, proxy={"workers": 1})
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10 * SLOW)
    s.sendall(b"GET /plain HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " + key.encode() + b"\r\n\r\n")
    assert read_answer(s).startswith(b"HTTP/1.1 200"), "the first request"
    s.sendall(b"\r\n" * 2048 + ws_handshake_bytes("/ws", key, ()))
    ws = ws_finish(s)
    try:
        for i in range(3):
            assert_echo(ws, "after empty lines %d" % i)
    finally:
        ws.close()
    assert p.get("/x", key=key).status == 200


def test_tunnel_access_line_names_its_handshake_after_the_pool_is_given_back(catalog, proxies, ws_upstream):
    """An open tunnel gives its libmicrohttpd pool back to the system (S6 of issue 15): its
    access line, written when it closes, still names the handshake's method, target, user
    and 101, and frames sent with the handshake still arrive."""
    import socket
    from fleet_helpers import encode_frame, ws_finish, ws_handshake_bytes
    user, key = ws_plan(catalog, "wslog")
    p = proxies.start(catalog, store="memory", upstream=ws_upstream, proxy={"workers": 1})
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10 * SLOW)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(ws_handshake_bytes("/ws/logged?room=7", key) + encode_frame(OP_TEXT, b"eager"))
    w = ws_finish(s)
    try:
        assert w.recv_message() == (OP_TEXT, b"eager")
        for i in range(3):
            assert_echo(w, "through a given-back pool %d" % i)
    finally:
        w.close()
    lines = wait_until(lambda: [ln for ln in p.access_log_lines() if ln.get("status") == 101], 10 * SLOW)
    assert lines and len(lines) == 1, p.access_log_lines()
    ln = lines[0]
    assert (ln.get("method"), ln.get("path"), ln.get("user"), ln.get("plan")) == \
        ("GET", "/ws/logged?room=7", user, "wslog"), ln
