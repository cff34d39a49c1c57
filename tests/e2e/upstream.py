#!/usr/bin/python3
"""A real HTTP/1.1 upstream for the end-to-end tests and the demo. Standard library only.

    upstream.py --port PORT [--host 127.0.0.1]     (PORT 0 = pick one)
                [--tls-cert CERT.pem --tls-key KEY.pem]   (HTTPS instead of HTTP)

The port it listens on is printed as the first line on stdout.

Endpoints (any method):
  /status/<N>            answers status N (body: the echo, except for 1xx/204/304)
  /slow/<ms>             waits ms milliseconds, then answers with the echo
  /sse/<n>/<ms>          text/event-stream, n events "data: i\\n\\n" every ms, each flushed
                         (chunked); with ?gate=NAME every event after the first waits for a
                         POST /__release/NAME (so a test can prove events pass one by one)
  /big/<bytes>           deterministic bytes: big_body(n) below, with Content-Length
  /hang                  never answers (holds the connection for 10 minutes)
  /headers?name=value    the echo, plus each query pair as a response header (repeats kept)
  /bighead/<bytes>       the echo, with a response head of at least <bytes> bytes: header
                         lines X-Pad-<i> of up to 4000 bytes each
  /headsize/<total>/<line>  a 200 whose raw head (status line to blank line) is exactly
                         <total> bytes: header lines X-H-<i> of <line> bytes each (CRLF
                         included; the last one takes up the rest), body "ok"
  /widehead/<n>[/close]  a 200 with a 50 KB head (X-H-<i> fields of 100 bytes) and a body
                         of n bytes "b", written in 64 KiB pieces 10 ms apart, with
                         Content-Length, or close-delimited with /close; HEAD: the head only
  /badhead[/<kind>]      a malformed response head, then closes; kind: nocolon (a field
                         line without a colon, the default), ctl (a control character in
                         a value), name (a space in a field name)
  /drop                  closes the connection without answering
  /close                 the echo, then closes the connection (close-delimited body)
  /__stats               JSON: connections that carried at least one non-__ request,
                         requests served, SSE events sent per gate
  /__release/<NAME>      lets one more event of the gated stream NAME go
  anything else          the echo: JSON {method, path, headers, body_b64, body_sha256,
                         length, upstream_port} with Content-Length

`path` is the request target exactly as received (raw, with the query); `headers` is a list
of [name, value] pairs in the order received, repeats kept.
"""
import argparse
import base64
import hashlib
import http.server
import json
import socket
import sys
import threading
import time
import urllib.parse


def big_body(n):
    """The deterministic body of /big/<n>: bytes 0..250 repeated (251 is prime, so the
    pattern never lines up with power-of-two buffer sizes)."""
    block = bytes(range(251))
    reps = n // len(block) + 1
    return (block * reps)[:n]


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = 0
        self.sse_sent = {}
        self.gates = {}
        self.inflight = 0        # requests being answered now (test endpoints excluded)
        self.inflight_max = 0    # the most at once since the start

    def gate(self, name):
        with self.lock:
            if name not in self.gates:
                self.gates[name] = threading.Semaphore(0)
            return self.gates[name]


STATS = Stats()


def exact_head(total, line):
    """A 200 head of exactly `total` bytes: fields X-H-<i> of `line` bytes each (the last
    one longer, to make up the rest), for a 2-byte body."""
    start, end = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n", b"\r\n"
    fields, left, i = [], total - len(start) - len(end), 0
    while left > 0:
        name = b"X-H-%d: " % i
        n = line if left - line >= line else left   # the last one takes the rest
        fields.append(name + b"v" * (n - len(name) - 2) + b"\r\n")
        left -= n
        i += 1
    head = start + b"".join(fields) + end
    assert len(head) == total, (len(head), total)
    return head


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "e2e-upstream/1"

    def version_string(self):
        return self.server_version

    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.counted = False

    def log_message(self, fmt, *args):  # quiet; the tests read /__stats instead
        pass

    def __getattr__(self, name):
        # Every method (GET, POST, PATCH, PROPFIND, ...) goes to the same dispatcher.
        if name.startswith("do_"):
            return self.dispatch
        raise AttributeError(name)

    # --- request body ------------------------------------------------------------------
    def read_body(self):
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            out = bytearray()
            while True:
                line = self.rfile.readline(65537)
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while True:  # trailers
                        t = self.rfile.readline(65537)
                        if t in (b"\r\n", b"\n", b""):
                            break
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(3)
        n = int(self.headers.get("Content-Length", "0") or "0")
        return self.rfile.read(n) if n > 0 else b""

    # --- responses ---------------------------------------------------------------------
    def send_bytes(self, status, body, ctype="application/json", extra=(), close=False):
        self.send_response(status)
        for k, v in extra:
            self.send_header(k, v)
        no_body = status < 200 or status in (204, 304)
        if not no_body:
            self.send_header("Content-Type", ctype)
            if not close:
                self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if not no_body and self.command != "HEAD":
            self.wfile.write(body)

    def echo(self, body):
        return json.dumps({
            "method": self.command,
            "path": self.path,
            "headers": [[k, v] for k, v in self.headers.items()],
            "body_b64": base64.b64encode(body).decode(),
            "body_sha256": hashlib.sha256(body).hexdigest(),
            "length": len(body),
            "upstream_port": self.server.server_address[1],
        }).encode()

    def dispatch(self):
        path = self.path
        route = urllib.parse.urlsplit(path).path
        parts = route.strip("/").split("/")
        counted = not route.startswith("/__")
        if counted:
            with STATS.lock:
                STATS.requests += 1
                STATS.inflight += 1
                STATS.inflight_max = max(STATS.inflight_max, STATS.inflight)
                if not self.counted:
                    self.counted = True
                    STATS.connections += 1
        try:
            return self.answer(path, parts)
        finally:
            if counted:
                with STATS.lock:
                    STATS.inflight -= 1

    def answer(self, path, parts):
        body = self.read_body()
        try:
            if parts[0] == "__stats":
                with STATS.lock:
                    s = {"connections": STATS.connections, "requests": STATS.requests,
                         "sse_sent": dict(STATS.sse_sent), "inflight": STATS.inflight,
                         "inflight_max": STATS.inflight_max}
                return self.send_bytes(200, json.dumps(s).encode())
            if parts[0] == "__release" and len(parts) == 2:
                STATS.gate(parts[1]).release()
                return self.send_bytes(200, b"{}")
            if parts[0] == "status" and len(parts) == 2:
                return self.send_bytes(int(parts[1]), self.echo(body))
            if parts[0] == "slow" and len(parts) == 2:
                time.sleep(int(parts[1]) / 1000.0)
                return self.send_bytes(200, self.echo(body))
            if parts[0] == "sse" and len(parts) == 3:
                return self.sse(int(parts[1]), int(parts[2]))
            if parts[0] == "big" and len(parts) == 2:
                return self.send_bytes(200, big_body(int(parts[1])), "application/octet-stream")
            if parts[0] == "hang":
                time.sleep(600)
                self.close_connection = True
                return None
            if parts[0] == "headers":
                q = urllib.parse.parse_qsl(urllib.parse.urlsplit(path).query, keep_blank_values=True)
                return self.send_bytes(200, self.echo(body), extra=q)
            if parts[0] == "bighead" and len(parts) == 2:
                want, pads, i = int(parts[1]), [], 0
                while want > 0:
                    n = min(4000, max(want - 16, 1))
                    pads.append(("X-Pad-%d" % i, "p" * n))
                    want -= n + 16
                    i += 1
                return self.send_bytes(200, self.echo(body), extra=pads)
            if parts[0] == "headsize" and len(parts) == 3:
                self.wfile.write(exact_head(int(parts[1]), int(parts[2])) + b"ok")
                return None
            if parts[0] == "widehead" and len(parts) in (2, 3):
                n, close = int(parts[1]), len(parts) == 3 and parts[2] == "close"
                self.send_response(200)
                for i in range(500):
                    self.send_header("X-H-%d" % i, "v" * 90)
                if close:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                else:
                    self.send_header("Content-Length", str(n))
                self.end_headers()
                if self.command != "HEAD":
                    for off in range(0, n, 65536):
                        self.wfile.write(b"b" * min(65536, n - off))
                        self.wfile.flush()
                        time.sleep(0.01)
                return None
            if parts[0] == "badhead":
                kind = parts[1] if len(parts) == 2 else "nocolon"
                line = {"nocolon": b"no colon here", "ctl": b"X-A: a\x01b",
                        "name": b"X A: b"}[kind]
                self.close_connection = True
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n" + line + b"\r\n\r\nok")
                return None
            if parts[0] == "drop":
                # closes the connection without a response (an upstream that fails)
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return None
            if parts[0] == "close":
                return self.send_bytes(200, self.echo(body), close=True)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return None
        except ValueError:
            return self.send_bytes(400, b'{"error":"bad test endpoint"}')
        return self.send_bytes(200, self.echo(body))

    def sse(self, n, ms):
        q = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        gate_name = q.get("gate")
        key = gate_name or "sse"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        gate = STATS.gate(gate_name) if gate_name else None
        for i in range(n):
            if i > 0:
                if gate is not None:
                    if not gate.acquire(timeout=60):
                        break
                if ms > 0:
                    time.sleep(ms / 1000.0)
            data = ("data: %d\n\n" % i).encode()
            # counted before it is written: a client holding event i can rely on the count
            # being i+1 (and not more, while the next one waits for its gate)
            with STATS.lock:
                STATS.sse_sent[key] = STATS.sse_sent.get(key, 0) + 1
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def tls_context(cert, key):
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    return ctx


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


def main():
    ap = argparse.ArgumentParser(description="echoing HTTP/1.1 upstream for tierproxy tests")
    ap.add_argument("--port", type=int, default=3000)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    ap.add_argument("--tls-key", help="... and this private key (PEM)")
    a = ap.parse_args()
    srv = Server((a.host, a.port), Handler)
    if a.tls_cert:
        srv.socket = tls_context(a.tls_cert, a.tls_key).wrap_socket(srv.socket, server_side=True)
    print(srv.server_address[1], flush=True)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
