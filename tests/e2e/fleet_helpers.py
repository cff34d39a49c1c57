"""Helpers for the fleet tests (concurrency limits, WebSocket, store faults):

  WsUpstream / ws_upstream     tests/e2e/ws_upstream.py as a process (a fixture for each test)
  ws_connect(port, ...)        a WebSocket client over a raw socket (fragmentation, control
                               frames and close codes under the test's control)
  http_send / http_read        one HTTP/1.1 request on a raw socket, and its answer
  parallel_requests(...)       many requests written at once on pre-opened connections
  fleet(...)                   several proxies sharing one Redis and one key prefix
"""
import base64
import json
import os
import pathlib
import re
import socket
import struct
import time

import pytest

from conftest import Resp, http_request, spawn_test_server, stop_test_server, wait_until

HERE = pathlib.Path(__file__).resolve().parent

# --------------------------------------------------------------------------------------
# the upstream


class WsUpstream:
    def __init__(self, tmpdir):
        tmpdir = pathlib.Path(tmpdir)
        tmpdir.mkdir(parents=True, exist_ok=True)
        self.err_path = tmpdir / ("ws_upstream-%d.err" % os.getpid())
        self.proc, self.port = spawn_test_server("ws_upstream.py", self.err_path)
        self.url = "http://127.0.0.1:%d" % self.port

    def stats(self):
        return http_request(self.port, "GET", "/__stats").json()

    def reset(self):
        http_request(self.port, "GET", "/__reset")

    def stat(self, name, user):
        return self.stats()[name].get(user, 0)

    def close(self):
        stop_test_server(self.proc)


@pytest.fixture
def ws_upstream(tmp_path):
    u = WsUpstream(tmp_path)
    yield u
    u.close()


# --------------------------------------------------------------------------------------
# raw HTTP


def http_send(sock, method, target, key=None, headers=(), body=b""):
    lines = ["%s %s HTTP/1.1" % (method, target), "Host: 127.0.0.1"]
    if key is not None:
        lines.append("Authorization: Bearer " + key)
    lines += ["%s: %s" % kv for kv in headers]
    if body or method in ("POST", "PUT"):
        lines.append("Content-Length: %d" % len(body))
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)


def _recv_until(sock, buf, pred):
    while not pred(buf):
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed by peer after %d bytes: %r" % (len(buf), bytes(buf[:300])))
        buf += chunk
    return buf


def read_head(sock, buf=None):
    """Reads a response head: (status, [(name, value)], rest-of-buffer)."""
    buf = _recv_until(sock, bytearray(buf or b""), lambda b: b"\r\n\r\n" in b)
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
    assert m, "not an HTTP response: %r" % head[:200]
    headers = []
    for ln in lines[1:]:
        k, _, v = ln.partition(":")
        headers.append((k.strip(), v.strip()))
    return int(m.group(1)), headers, rest


def http_read(sock):
    """Reads one whole response (Content-Length, chunked or close-delimited) as a Resp."""
    t0 = time.monotonic()
    status, headers, rest = read_head(sock)
    hd = {k.lower(): v for k, v in headers}
    buf = bytearray(rest)
    if "content-length" in hd:
        n = int(hd["content-length"])
        buf = _recv_until(sock, buf, lambda b: len(b) >= n)
        body = bytes(buf[:n])
    elif "chunked" in hd.get("transfer-encoding", "").lower():
        body = b""
        while True:
            buf = _recv_until(sock, buf, lambda b: b"\r\n" in b)
            line, _, more = bytes(buf).partition(b"\r\n")
            size = int(line.split(b";")[0], 16)
            buf = _recv_until(sock, bytearray(more), lambda b: len(b) >= size + 2)
            body += bytes(buf[:size])
            buf = buf[size + 2:]
            if size == 0:
                break
    elif status in (101, 204, 304) or 100 <= status < 200:
        body = b""
    else:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        body = bytes(buf)
    return Resp(status, "", headers, body, time.monotonic() - t0, 0, time.time())


def parallel_requests(targets, timeout=30):
    """targets: [(port, method, target, key)]. Opens every connection first, then writes
    every request in one tight loop (so they reach the proxies as close together as a
    single thread can make it), then reads every answer. Returns the Resps in order
    (None for a connection that failed)."""
    socks = []
    try:
        for port, _, _, _ in targets:
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        for s, (_, method, target, key) in zip(socks, targets):
            http_send(s, method, target, key=key)
        out = []
        for s in socks:
            try:
                out.append(http_read(s))
            except (OSError, ConnectionError):
                out.append(None)
        return out
    finally:
        for s in socks:
            s.close()


def error_code(r):
    try:
        return json.loads(r.body).get("error_code")
    except (ValueError, AttributeError):
        return None


def check_concurrency_429(r):
    """r is a refusal over a concurrency limit: 429, Retry-After whole seconds >= 1, problem body
    with error_code concurrency_limit_exceeded and retry_after equal to Retry-After."""
    assert r is not None and r.status == 429, r
    ct = (r.header("Content-Type") or "").split(";")[0].strip().lower()
    assert ct == "application/problem+json", r
    body = json.loads(r.body)
    assert body.get("error_code") == "concurrency_limit_exceeded", r
    ra = r.header("Retry-After")
    assert ra is not None and ra.isdigit() and int(ra) >= 1, "bad Retry-After: %r" % r
    assert body.get("retry_after") == int(ra), r
    return body


# --------------------------------------------------------------------------------------
# WebSocket client

OP_CONT, OP_TEXT, OP_BIN, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA


def encode_frame(opcode, payload, fin=True, mask=True):
    b0 = (0x80 if fin else 0) | opcode
    n = len(payload)
    mbit = 0x80 if mask else 0
    if n < 126:
        head = struct.pack("!BB", b0, mbit | n)
    elif n < 65536:
        head = struct.pack("!BBH", b0, mbit | 126, n)
    else:
        head = struct.pack("!BBQ", b0, mbit | 127, n)
    if not mask:
        return head + payload
    key = os.urandom(4)
    return head + key + xor_mask(payload, key)


def xor_mask(data, key):
    n = len(data)
    if n == 0:
        return b""
    m = int.from_bytes((key * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(data, "big") ^ m).to_bytes(n, "big")


def close_payload(code, reason=b""):
    return struct.pack("!H", code) + reason


def parse_close(payload):
    if len(payload) >= 2:
        return struct.unpack("!H", payload[:2])[0], payload[2:]
    return None, b""


class HandshakeRefused(Exception):
    def __init__(self, resp):
        super().__init__("WebSocket handshake answered %d: %r" % (resp.status, resp))
        self.resp = resp


class WS:
    def __init__(self, sock, buf, resp):
        self.sock = sock
        self.buf = bytearray(buf)
        self.resp = resp          # the 101 answer

    def send_frame(self, opcode, payload, fin=True):
        self.sock.sendall(encode_frame(opcode, payload, fin))

    def send_text(self, text):
        self.send_frame(OP_TEXT, text.encode() if isinstance(text, str) else text)

    def send_binary(self, data):
        self.send_frame(OP_BIN, data)

    def send_close(self, code=1000, reason=b""):
        self.send_frame(OP_CLOSE, close_payload(code, reason))

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("connection closed by the proxy")
            self.buf += chunk

    def recv_frame(self):
        """(fin, opcode, payload) of the next frame. Frames from the server must not be
        masked (asserted)."""
        self._need(2)
        fin, opcode = bool(self.buf[0] & 0x80), self.buf[0] & 0x0F
        assert self.buf[0] & 0x70 == 0, "RSV bits set in a frame from the proxy"
        masked, n = bool(self.buf[1] & 0x80), self.buf[1] & 0x7F
        assert not masked, "a frame from the server side came masked"
        off = 2
        if n == 126:
            self._need(4)
            n = struct.unpack("!H", self.buf[2:4])[0]
            off = 4
        elif n == 127:
            self._need(10)
            n = struct.unpack("!Q", self.buf[2:10])[0]
            off = 10
        self._need(off + n)
        payload = bytes(self.buf[off:off + n])
        del self.buf[:off + n]
        return fin, opcode, payload

    def recv_message(self):
        """(opcode, payload) of the next data message, fragments joined; control frames
        arriving in between are returned as they come instead."""
        first = None
        parts = []
        while True:
            fin, opcode, payload = self.recv_frame()
            if opcode >= 0x8:
                return opcode, payload
            if first is None:
                first = opcode
            parts.append(payload)
            if fin:
                return first, b"".join(parts)

    def recv_close(self):
        """Reads frames until a close frame; returns (code, reason). Data frames in between
        are skipped."""
        for _ in range(10000):
            fin, opcode, payload = self.recv_frame()
            if opcode == OP_CLOSE:
                return parse_close(payload)
        raise AssertionError("no close frame within 10000 frames")

    def wait_eof(self, timeout=5):
        """True when the proxy closes the TCP connection within timeout (pending frames
        read and dropped)."""
        self.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except socket.timeout:
            return False
        except ConnectionError:
            return True

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def ws_handshake_bytes(target, key=None, headers=()):
    lines = ["GET %s HTTP/1.1" % target, "Host: 127.0.0.1", "Upgrade: websocket",
             "Connection: Upgrade", "Sec-WebSocket-Version: 13",
             "Sec-WebSocket-Key: " + base64.b64encode(os.urandom(16)).decode()]
    if key is not None:
        lines.append("Authorization: Bearer " + key)
    lines += ["%s: %s" % kv for kv in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def ws_finish(sock):
    """Reads the handshake answer on sock: a WS on 101, else raises HandshakeRefused."""
    status, headers, rest = read_head(sock)
    if status == 101:
        return WS(sock, rest, Resp(101, "", headers, b"", 0, 0, time.time()))
    # the refusal's body
    hd = {k.lower(): v for k, v in headers}
    n = int(hd.get("content-length", "0"))
    buf = _recv_until(sock, bytearray(rest), lambda b: len(b) >= n)
    sock.close()
    raise HandshakeRefused(Resp(status, "", headers, bytes(buf[:n]), 0, 0, time.time()))


def ws_connect(port, target="/ws", key=None, headers=(), timeout=10):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        s.sendall(ws_handshake_bytes(target, key, headers))
        return ws_finish(s)
    except HandshakeRefused:
        raise
    except Exception:
        s.close()
        raise


def ws_try(port, target="/ws", key=None, timeout=10):
    """A WS on 101, else the refusal's Resp."""
    try:
        return ws_connect(port, target, key, timeout=timeout)
    except HandshakeRefused as e:
        return e.resp


def parallel_ws(targets, timeout=15):
    """targets: [(port, target, key)]. Opens every connection, writes every handshake in one
    loop, then reads every answer: a list of WS (101) or refusal Resps."""
    socks = []
    out = []
    try:
        for port, _, _ in targets:
            s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            socks.append(s)
        for s, (_, target, key) in zip(socks, targets):
            s.sendall(ws_handshake_bytes(target, key))
        for s in socks:
            try:
                out.append(ws_finish(s))
            except HandshakeRefused as e:
                out.append(e.resp)
        return out
    except BaseException:
        for w in out:
            if isinstance(w, WS):
                w.close()
        for s in socks:
            s.close()
        raise


# --------------------------------------------------------------------------------------
# a fleet of proxies on one Redis

_prefix_n = [0]


def fleet(proxies, catalog, redis, upstream, n=2, limits=None, proxy=None, **kw):
    """n proxies on one Redis sharing a key prefix (so they share the limits)."""
    _prefix_n[0] += 1
    prefix = "fleet%d_%d_%d:" % (os.getpid(), _prefix_n[0], int(time.time() * 1000) % 100000)
    out = []
    for _ in range(n):
        out.append(proxies.start(catalog, store="redis", redis=redis, key_prefix=prefix,
                                 upstream=upstream, limits=dict(limits or {}),
                                 proxy=dict(proxy or {}), **kw))
    return out


def wait_stat(up, name, user, value, timeout=5):
    """Waits until the upstream's counter name[user] equals value; returns the last value."""
    last = [None]

    def pred():
        last[0] = up.stat(name, user)
        return last[0] == value
    wait_until(pred, timeout)
    return last[0]
