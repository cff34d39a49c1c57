"""WebSocket handshakes and tunnels under clients that leave at every stage (issue 12):
the concurrency slot comes back at once (not after lease_ttl_ms, not never), the upstream
side is closed, and no descriptor stays behind. Also: a reload (SIGHUP) reaches handshakes,
permessage-deflate frames (RSV1) pass when the upstream negotiated the extension, and the
idle timeout is on by default."""
import os
import socket
import struct
import time
import zlib

import pytest

from conftest import SLOW, http_request, wait_until, write_ini
from fleet_helpers import (OP_CLOSE, OP_TEXT, WS, WsUpstream, check_concurrency_429,
                           read_head, wait_stat, ws_handshake_bytes, ws_try,
                           ws_upstream, xor_mask)  # noqa: F401

# How long a slot may take to come back after its client left: far below lease_ttl_ms
# (set to 30 s here), so only a release, not an expiry, passes.
SLOT_BACK_S = 3
LEASE_TTL_MS = 30000


def one_slot_proxy(proxies, catalog, ws_upstream, store, redis=None, **proxy):
    catalog.plan("ws1", "--rate", "100000/min", "--concurrency", "1")
    user, key = catalog.user_key("ws1")
    p = proxies.start(catalog, upstream=ws_upstream, store=store, redis=redis,
                      limits={"lease_ttl_ms": LEASE_TTL_MS}, proxy=dict(proxy))
    return p, user, key


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10 * SLOW)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def reset(sock):
    """Closes with SO_LINGER 0: the peer gets a RST, as from a client that crashed."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def slot_comes_back(port, key, within_s=SLOT_BACK_S):
    """True when a fresh handshake by the same user gets its 101 within within_s. The probe's
    own tunnel is then closed, and its slot waited for (a plain request admitted: its slot is
    back before its answer ends), so that the caller's next handshake finds the slot free
    and not the probe's, whose close the proxy may not have seen yet on a loaded box."""
    deadline = time.monotonic() + within_s * SLOW
    last = None
    while time.monotonic() < deadline:
        last = ws_try(port, "/ws", key)
        if isinstance(last, WS):
            last.close()
            return wait_until(lambda: http_request(port, "GET", "/slow/0", key=key).status == 200,
                              max(deadline - time.monotonic(), 1.0), interval=0.02)
        check_concurrency_429(last)
        time.sleep(0.1)
    return False


def upstream_side_closed(up, user, within_s=5):
    return wait_stat(up, "ws_conns", user, 0, within_s * SLOW) == 0


def open_fds(proc):
    return len(os.listdir("/proc/%d/fd" % proc.pid))


# --------------------------------------------------------------------------------------
# the client leaves during the handshake or right after it


# Delays of the upstream's 101 after the client's reset: the short ones come before the
# proxy starts watching a waiting client's socket (the review's leak), the long one after.
DELAYS_MS = (5, 10, 20, 40, 300)


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_reset_before_the_101_gives_the_slot_back(catalog, proxies, ws_upstream, store):
    p, user, key = one_slot_proxy(proxies, catalog, ws_upstream, store)
    for delay in DELAYS_MS:
        s = connect(p.port)
        s.sendall(ws_handshake_bytes("/delay101/%d/ws" % delay, key))
        reset(s)
        assert slot_comes_back(p.port, key), \
            "the slot of a client reset %d ms before the upstream's 101 did not come back " \
            "within %ss" % (delay, SLOT_BACK_S)
        assert upstream_side_closed(ws_upstream, user), \
            "the upstream side of a handshake whose client reset stayed open (101 after %d ms)" % delay
    # a 101 that never reached its client is not logged as one: 499, as nginx logs a
    # client gone before its answer (a handshake MHD dropped before asking us is not logged;
    # one the proxy reads only after the next probe took the slot is refused, and logged 429)
    lines = p.access_log_lines()
    statuses = [ln["status"] for ln in lines if "delay101" in ln["path"]]
    assert all(st in (499, 429) for st in statuses), \
        "handshakes reset before their 101 were logged %s; the whole access log:\n%s" % (
            statuses, "\n".join(str(ln) for ln in lines))


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_orderly_close_before_the_101_gives_the_slot_back(catalog, proxies, ws_upstream, store):
    p, user, key = one_slot_proxy(proxies, catalog, ws_upstream, store)
    for delay in DELAYS_MS:
        s = connect(p.port)
        s.sendall(ws_handshake_bytes("/delay101/%d/ws" % delay, key))
        s.close()
        assert slot_comes_back(p.port, key), \
            "the slot of a client gone %d ms before the upstream's 101 did not come back " \
            "within %ss" % (delay, SLOT_BACK_S)
        assert upstream_side_closed(ws_upstream, user), \
            "the upstream side of a handshake whose client left stayed open (101 after %d ms)" % delay


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_reset_before_the_head_is_complete(catalog, proxies, ws_upstream, store):
    p, user, key = one_slot_proxy(proxies, catalog, ws_upstream, store)
    s = connect(p.port)
    s.sendall(ws_handshake_bytes("/ws", key)[:-10])
    time.sleep(0.2)
    reset(s)
    assert slot_comes_back(p.port, key)
    assert ws_upstream.stat("ws_total", user) == 1, "the half-sent handshake reached the upstream"


def test_reset_while_the_limiter_decides(catalog, proxies, ws_upstream, redis_factory):
    """Redis frozen: the handshake waits for the limiter; the client resets; Redis thaws."""
    r = redis_factory()
    p, user, key = one_slot_proxy(proxies, catalog, ws_upstream, "redis", redis=r)
    assert slot_comes_back(p.port, key)          # the path works, the scripts are loaded
    s = connect(p.port)
    r.pause()   # for less than the proxy's Redis command timeout (500 ms): no 503
    try:
        s.sendall(ws_handshake_bytes("/delay101/10/ws", key))
        time.sleep(0.1)
        reset(s)
        time.sleep(0.1)
    finally:
        r.resume()
    assert slot_comes_back(p.port, key), \
        "the slot of a client reset while the limiter decided did not come back within %ss" % SLOT_BACK_S
    assert upstream_side_closed(ws_upstream, user), "an upstream connection stayed open"


@pytest.mark.parametrize("store", ["memory", "redis"])
def test_reset_right_after_the_101(catalog, proxies, ws_upstream, store):
    p, user, key = one_slot_proxy(proxies, catalog, ws_upstream, store)
    s = connect(p.port)
    s.sendall(ws_handshake_bytes("/ws", key))
    status, _, _ = read_head(s)
    assert status == 101
    reset(s)
    assert slot_comes_back(p.port, key), \
        "the slot of a tunnel whose client reset did not come back within %ss" % SLOT_BACK_S
    assert upstream_side_closed(ws_upstream, user), "the upstream side of the tunnel stayed open"


def test_50_resets_on_an_exempt_path_leave_no_descriptor(catalog, proxies, ws_upstream):
    p = proxies.start(catalog, upstream=ws_upstream, proxy={"exempt_paths": "/public", "workers": 1})
    # one whole tunnel first, so whatever is opened once (pools, caches) is open already
    w = ws_try(p.port, "/public/ws")
    assert isinstance(w, WS), w
    w.close()
    assert upstream_side_closed(ws_upstream, "-")
    time.sleep(0.3)
    before = open_fds(p.proc)
    for i in range(50):
        s = connect(p.port)
        s.sendall(ws_handshake_bytes("/public/delay101/%d/ws" % DELAYS_MS[i % 3]))
        reset(s)
    assert upstream_side_closed(ws_upstream, "-", 10), \
        "%d upstream connections stayed open" % ws_upstream.stat("ws_conns", "-")
    wait_until(lambda: open_fds(p.proc) <= before, 5 * SLOW)
    after = open_fds(p.proc)
    assert after <= before, "the proxy held %d descriptors before 50 resets, %d after" % (before, after)
    w = ws_try(p.port, "/public/ws")
    assert isinstance(w, WS), w
    w.close()


# --------------------------------------------------------------------------------------
# reload


def test_sighup_moves_handshakes_to_the_new_upstream(catalog, proxies, ws_upstream, tmp_path):
    other = WsUpstream(tmp_path / "b")
    try:
        catalog.plan("wsr", "--rate", "100000/min")
        user, key = catalog.user_key("wsr")
        p = proxies.start(catalog, upstream=ws_upstream)
        w = ws_try(p.port, "/ws", key)
        assert isinstance(w, WS), w
        w.close()
        assert ws_upstream.stat("ws_total", user) == 1
        ini = p.ini
        ini["proxy"]["upstream"] = other.url
        write_ini(p.ini_path, ini)
        p.signal(1)  # SIGHUP
        assert wait_until(lambda: "configuration reloaded" in p.stderr(), 10 * SLOW), p.stderr()[-2000:]
        for i in range(4):   # every worker
            w = ws_try(p.port, "/ws", key)
            assert isinstance(w, WS), w
            w.close()
        assert other.stat("ws_total", user) == 4, \
            "after SIGHUP changed upstream, %d of 4 handshakes went to the new upstream, %d to the old" \
            % (other.stat("ws_total", user), ws_upstream.stat("ws_total", user) - 1)
    finally:
        other.close()


# --------------------------------------------------------------------------------------
# permessage-deflate


def deflate_message(text):
    """A permessage-deflate message payload (RFC 7692 7.2.1): raw deflate, the final empty
    stored block's 00 00 ff ff removed."""
    c = zlib.compressobj(wbits=-15)
    data = c.compress(text) + c.flush(zlib.Z_SYNC_FLUSH)
    assert data.endswith(b"\x00\x00\xff\xff")
    return data[:-4]


def inflate_message(payload):
    return zlib.decompressobj(wbits=-15).decompress(payload + b"\x00\x00\xff\xff")


def send_raw_frame(ws, first_byte, payload):
    key = os.urandom(4)
    assert len(payload) < 126
    ws.sock.sendall(bytes([first_byte, 0x80 | len(payload)]) + key + xor_mask(payload, key))


def recv_raw_frame(ws):
    """(first byte, payload) of the next frame, RSV bits left in the first byte."""
    ws._need(2)
    b0, n = ws.buf[0], ws.buf[1] & 0x7F
    assert n < 126 and not ws.buf[1] & 0x80
    ws._need(2 + n)
    payload = bytes(ws.buf[2:2 + n])
    del ws.buf[:2 + n]
    return b0, payload


def deflate_ws(port, key, path="/deflate"):
    s = connect(port)
    s.sendall(ws_handshake_bytes(path, key, [("Sec-WebSocket-Extensions",
                                              "permessage-deflate; client_max_window_bits")]))
    status, headers, rest = read_head(s)
    assert status == 101, (status, headers)
    w = WS(s, rest, None)
    w.headers = headers
    return w


def test_permessage_deflate_frames_pass_and_count(catalog, proxies, ws_upstream):
    catalog.plan("wsd", "--rate", "100000/min", "--ws-messages", "3/min")
    user, key = catalog.user_key("wsd")
    p = proxies.start(catalog, upstream=ws_upstream)
    w = deflate_ws(p.port, key)
    try:
        ext = [v for k, v in w.headers if k.lower() == "sec-websocket-extensions"]
        assert ext == ["permessage-deflate"], w.headers
        for i in range(3):
            text = b"compressed message %d " % i * 20
            payload = deflate_message(text)
            send_raw_frame(w, 0x80 | 0x40 | OP_TEXT, payload)   # FIN, RSV1, text
            b0, got = recv_raw_frame(w)
            assert b0 == 0x80 | 0x40 | OP_TEXT, "frame %d came back as %#x" % (i, b0)
            assert got == payload and inflate_message(got) == text
        assert wait_stat(ws_upstream, "ws_messages", user, 3) == 3
        # the fourth message is over --ws-messages 3/min: compressed ones count too
        send_raw_frame(w, 0x80 | 0x40 | OP_TEXT, deflate_message(b"one too many"))
        assert w.recv_close()[0] == 1008
    finally:
        w.close()


def test_rsv1_refused_without_negotiation_and_rsv2_always(catalog, proxies, ws_upstream):
    catalog.plan("wsd", "--rate", "100000/min")
    user, key = catalog.user_key("wsd")
    p = proxies.start(catalog, upstream=ws_upstream)
    # the upstream did not answer the extension: RSV1 is a protocol error
    w = deflate_ws(p.port, key, "/ws")
    try:
        assert not [v for k, v in w.headers if k.lower() == "sec-websocket-extensions"]
        send_raw_frame(w, 0x80 | 0x40 | OP_TEXT, deflate_message(b"not negotiated"))
        assert w.recv_close()[0] == 1002
    finally:
        w.close()
    # negotiated, but RSV2 and RSV3 belong to no extension we know
    for rsv in (0x20, 0x10):
        w = deflate_ws(p.port, key)
        try:
            send_raw_frame(w, 0x80 | rsv | OP_TEXT, b"x")
            assert w.recv_close()[0] == 1002
        finally:
            w.close()
    # and a tunnel that negotiated it still passes uncompressed messages
    w = deflate_ws(p.port, key)
    try:
        send_raw_frame(w, 0x80 | OP_TEXT, b"plain")
        assert recv_raw_frame(w) == (0x80 | OP_TEXT, b"plain")
        send_raw_frame(w, 0x80 | OP_CLOSE, struct.pack("!H", 1000))
        assert recv_raw_frame(w)[0] == 0x80 | OP_CLOSE
    finally:
        w.close()
