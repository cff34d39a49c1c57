"""Response bodies stream through as they arrive: server-sent events are not held back.
The upstream sends each event only after the test has received the one before, so a
proxy that buffers never delivers the first."""
import itertools
import socket
import time

_gates = itertools.count(1)


class StreamReader:
    """Reads an HTTP/1.1 response from a raw socket incrementally, de-chunking."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.head = None
        self.chunked = False
        self.body = b""
        self.done = False

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            self.done = True
        self.buf += data
        return bool(data)

    def read_head(self):
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                raise AssertionError("connection closed before the response head")
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.head = head.decode("latin-1")
        self.chunked = "transfer-encoding: chunked" in self.head.lower()
        return self.head

    def _decode(self):
        if not self.chunked:
            self.body += self.buf
            self.buf = b""
            return
        while True:
            line, sep, rest = self.buf.partition(b"\r\n")
            if not sep:
                return
            size = int(line.split(b";")[0], 16)
            if size == 0:
                self.done = True
                self.buf = b""
                return
            if len(rest) < size + 2:
                return
            self.body += rest[:size]
            self.buf = rest[size + 2:]

    def read_until(self, needle):
        self._decode()
        while needle not in self.body:
            if self.done or not self._fill():
                raise AssertionError("stream ended before %r; got %r" % (needle, self.body))
            self._decode()


def test_sse_events_arrive_one_by_one(catalog, start_proxy, upstream_factory):
    up = upstream_factory()
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, upstream=up)
    gate = "g%d" % next(_gates)
    n = 4
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(("GET /sse/%d/0?gate=%s HTTP/1.1\r\nHost: t\r\nAccept: text/event-stream\r\n"
                   "Authorization: Bearer %s\r\n\r\n" % (n, gate, key)).encode())
        rd = StreamReader(s)
        head = rd.read_head()
        assert head.startswith("HTTP/1.1 200"), head
        assert "text/event-stream" in head.lower(), head
        for i in range(n):
            # event i reaches the client while the upstream still holds event i+1
            try:
                rd.read_until(b"data: %d\n\n" % i)
            except socket.timeout:
                raise AssertionError("event %d not delivered while the upstream waits "
                                     "(the proxy holds the stream back); got %r"
                                     % (i, rd.body))
            assert up.stats()["sse_sent"].get(gate) == i + 1
            if i + 1 < n:
                up.release(gate)
        rd.read_until(b"data: %d\n\n" % (n - 1))
        assert rd.body == b"".join(b"data: %d\n\n" % i for i in range(n))


def test_sse_timed_stream_complete(catalog, start_proxy):
    # a stream paced by the upstream arrives complete and in order
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    with socket.create_connection(("127.0.0.1", p.port), timeout=15) as s:
        s.sendall(("GET /sse/5/50 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
                   "Authorization: Bearer %s\r\n\r\n" % key).encode())
        rd = StreamReader(s)
        rd.read_head()
        t0 = time.monotonic()
        rd.read_until(b"data: 0\n\n")
        first = time.monotonic() - t0
        rd.read_until(b"data: 4\n\n")
        assert rd.body == b"".join(b"data: %d\n\n" % i for i in range(5))
        assert first < 5
