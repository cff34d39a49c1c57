"""When the proxy itself ends a WebSocket tunnel (1008 over a --ws-messages limit, 1002 for a
bad frame, the idle timeout, a drain), both sides get a close frame (SPEC, "Clients as they
are"): the client an unmasked one, the upstream a masked one (RFC 6455 5.3: toward the
upstream the proxy is the client), each with the code and reason. Complete frames that
arrived before the frame that ended the tunnel, in the same read, reach the upstream first,
byte for byte. The proxy waits a short while for the upstream's answering close (RFC 6455
7.1.1) without holding up anything else on its worker.

The upstream is ws_raw_upstream.py, inside the test, so the bytes it received are exact."""
import os
import signal
import socket
import time

import pytest

from conftest import SLOW
from fleet_helpers import (OP_BIN, OP_CLOSE, OP_PING, OP_TEXT, encode_frame,
                           parse_close, ws_connect)
from ws_raw_upstream import RawWsUpstream, half_payload, parse_frame


@pytest.fixture
def raw_upstream():
    up = RawWsUpstream()
    yield up
    up.close()


def start(proxies, catalog, up, *flags, **proxy):
    catalog.plan("wsclose", "--rate", "100000/min", *flags)
    user, key = catalog.user_key("wsclose")
    p = proxies.start(catalog, store="memory", upstream=up, proxy=dict(proxy))
    return p, key


def connect(p, key, path="/ws"):
    w = ws_connect(p.port, path, key=key, timeout=10 * SLOW)
    w.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return w


def upstream_close(conn, within_s=5):
    """The close frame the upstream received (asserted: one, masked, last), after the
    proxy's side of the connection ended."""
    assert conn.wait_end(within_s * SLOW), \
        "the proxy did not end the upstream side within %ss" % (within_s * SLOW)
    closes = conn.close_frames()
    assert closes, "the upstream got no close frame, only the TCP close (%s); frames: %r" \
        % (conn.end_how, conn.frames[-5:])
    assert len(closes) == 1 and conn.frames[-1] is closes[0], conn.frames[-5:]
    assert closes[0].masked, "the close frame to the upstream is not masked (RFC 6455 5.3)"
    return closes[0]


def client_close(w):
    """The close code and reason the client got (recv_frame asserts it unmasked)."""
    code, reason = w.recv_close()
    w.send_close(code or 1000)
    return code, reason


def test_over_the_message_limit_both_sides_get_1008(catalog, proxies, raw_upstream):
    p, key = start(proxies, catalog, raw_upstream, "--ws-messages", "2/min")
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        for i in range(2):
            w.send_text("m%d" % i)
            assert w.recv_message() == (OP_TEXT, b"m%d" % i)
        w.send_text("one too many")
        assert client_close(w)[0] == 1008
        close = upstream_close(conn)
        assert close.close_code == 1008, close
        assert [f.payload for f in conn.frames[:-1]] == [b"m0", b"m1"], \
            "the message over the limit reached the upstream: %r" % conn.frames
        assert w.wait_eof(5 * SLOW)
    finally:
        w.close()


def test_bad_frame_both_sides_get_1002(catalog, proxies, raw_upstream):
    p, key = start(proxies, catalog, raw_upstream)
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        w.sock.sendall(encode_frame(0x3, b"reserved opcode"))
        assert client_close(w)[0] == 1002
        close = upstream_close(conn)
        assert close.close_code == 1002, close
        assert conn.frames == [close], "the bad frame reached the upstream: %r" % conn.frames
    finally:
        w.close()


def test_idle_timeout_both_sides_get_1001(catalog, proxies, raw_upstream):
    idle_ms = int(400 * SLOW)
    p, key = start(proxies, catalog, raw_upstream, websocket_idle_timeout_ms=idle_ms)
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        w.send_text("then silence")
        assert w.recv_message() == (OP_TEXT, b"then silence")
        assert client_close(w)[0] == 1001
        close = upstream_close(conn)
        assert close.close_code == 1001, close
    finally:
        w.close()


def test_drain_both_sides_get_1001(catalog, proxies, raw_upstream):
    p, key = start(proxies, catalog, raw_upstream)
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        w.send_text("before the drain")
        assert w.recv_message() == (OP_TEXT, b"before the drain")
        p.signal(signal.SIGTERM)
        assert client_close(w)[0] == 1001
        close = upstream_close(conn)
        assert close.close_code == 1001, close
        p.proc.wait(15 * SLOW)
        assert p.proc.returncode == 0, p.stderr()[-2000:]
    finally:
        w.close()


def frames_then(bad):
    """Three complete frames (a text, a binary, a ping) and then `bad`, as one write."""
    good = [encode_frame(OP_TEXT, b"first, whole"), encode_frame(OP_BIN, os.urandom(300)),
            encode_frame(OP_PING, b"still whole")]
    return good, b"".join(good) + bad


def test_frames_before_a_bad_one_in_the_same_segment_are_forwarded(catalog, proxies, raw_upstream):
    p, key = start(proxies, catalog, raw_upstream)
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        # RSV2 set, no extension negotiated: 1002
        good, data = frames_then(bytes([0x80 | 0x20 | OP_TEXT, 0x80 | 1]) + os.urandom(4) + b"x")
        w.sock.sendall(data)
        assert conn.wait_end(5 * SLOW), "the proxy did not end the upstream side"
        sent = b"".join(good)
        assert bytes(conn.raw[:len(sent)]) == sent, \
            "the upstream got %d bytes, not first the %d of the three whole frames sent " \
            "before the bad one: %r" % (len(conn.raw), len(sent), conn.frames)
        close = upstream_close(conn)
        assert bytes(conn.raw) == sent + close.raw
        assert close.close_code == 1002
        # the client's close went out with the bad frame: the upstream's echoes, later, are
        # data after a close (RFC 6455 5.5.1) and do not follow it
        assert client_close(w)[0] == 1002
    finally:
        w.close()


def test_messages_before_the_one_over_the_limit_in_the_same_segment_are_forwarded(
        catalog, proxies, raw_upstream):
    p, key = start(proxies, catalog, raw_upstream, "--ws-messages", "3/min")
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        msgs = [encode_frame(OP_TEXT, b"message %d" % i) for i in range(4)]
        w.sock.sendall(b"".join(msgs))
        assert conn.wait_end(5 * SLOW), "the proxy did not end the upstream side"
        within = b"".join(msgs[:3])
        assert bytes(conn.raw[:len(within)]) == within, \
            "the upstream did not get the 3 messages within the limit, sent in the same " \
            "segment as the 4th: %r" % conn.frames
        close = upstream_close(conn)
        assert close.close_code == 1008
        assert bytes(conn.raw) == within + close.raw, conn.frames
        assert client_close(w)[0] == 1008
    finally:
        w.close()


def test_an_upstream_that_never_answers_the_close_holds_up_nothing(catalog, proxies, raw_upstream):
    """The upstream at /mute neither answers the close frame nor closes: the proxy ends its
    side by itself within a few seconds, and the same worker serves meanwhile."""
    p, key = start(proxies, catalog, raw_upstream, "--ws-messages", "1/min", workers=1)
    w = connect(p, key, "/mute")
    conn = raw_upstream.next_conn()
    try:
        w.send_text("within")
        assert w.recv_message() == (OP_TEXT, b"within")
        w.send_text("over")
        t0 = time.monotonic()
        assert client_close(w)[0] == 1008
        # another tunnel on the one worker works while the first waits for its upstream
        w2 = connect(p, key)
        raw_upstream.next_conn()
        w2.send_text("meanwhile")
        assert w2.recv_message() == (OP_TEXT, b"meanwhile")
        w2.close()
        assert conn.wait_frames(lambda fs: any(f.opcode == OP_CLOSE for f in fs), 5 * SLOW), \
            "the upstream got no close frame: %r" % conn.frames
        assert conn.wait_end(10 * SLOW), "the proxy kept the unanswered upstream side open"
        took = conn.t_end - t0
        print("unanswered close: the proxy closed the upstream side %.2fs after the 1008" % took)
        assert w.wait_eof(5 * SLOW)
    finally:
        w.close()


def test_client_close_still_passes_through(catalog, proxies, raw_upstream):
    """A close the client starts is not the proxy's: the upstream gets the client's own
    frame, byte for byte, and answers it."""
    p, key = start(proxies, catalog, raw_upstream)
    w = connect(p, key)
    conn = raw_upstream.next_conn()
    try:
        frame = encode_frame(OP_CLOSE, b"\x0f\xa1client bye")
        w.sock.sendall(frame)
        assert parse_close(w.recv_frame()[2]) == (4001, b"client bye")
        assert conn.wait_end(5 * SLOW)
        assert bytes(conn.raw) == frame
        assert w.wait_eof(5 * SLOW)
    finally:
        w.close()


@pytest.mark.parametrize("size", [1000, 3 << 20])
def test_the_close_to_the_client_follows_the_upstreams_frame_in_flight(catalog, proxies, raw_upstream,
                                                                       size):
    """The proxy refuses a client frame while the upstream is in the middle of a frame toward
    the client: the rest of that frame goes first and the close frame after it, so the
    client reads a whole frame and then the close, not the close's bytes as payload. At
    3 MiB the rest is more than the proxy queues toward a client before it waits for it
    to read."""
    p, key = start(proxies, catalog, raw_upstream)
    w = connect(p, key, "/half")
    conn = raw_upstream.next_conn()
    try:
        w.send_text("half %d" % size)
        head = 4 if size < 65536 else 10
        w._need(head + size // 2)                # the head and half of the payload
        w.sock.sendall(encode_frame(0x3, b"reserved opcode"))
        w.sock.settimeout(10 * SLOW)
        while True:                              # everything until the proxy's EOF
            chunk = w.sock.recv(65536)
            if not chunk:
                break
            w.buf += chunk
        raw = bytes(w.buf)
        frames = []
        while True:
            got = parse_frame(raw)
            if got is None:
                break
            frames.append(got[0])
            raw = raw[got[1]:]
        assert [(f.opcode, f.payload if f.opcode == OP_BIN else f.close_code) for f in frames] \
            == [(OP_BIN, half_payload(size)), (OP_CLOSE, 1002)], \
            "the client did not read the upstream's whole frame and then close 1002: %r " \
            "(and %d bytes more)" % (frames, len(raw))
        assert upstream_close(conn).close_code == 1002
    finally:
        w.close()
