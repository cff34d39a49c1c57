"""HTTP conformance, SPEC "Clients as they are": "a response to HEAD, a 304 and a 204 carry
no Content-Length that the upstream did not send; an HTTP/1.1 request without Host gets
400; a Transfer-Encoding whose last coding is not chunked gets 400 and the connection is
closed; HTTP/1.2 and other 1.x minor versions are treated as HTTP/1.1."

Raw sockets on both sides: http.client and curl read a HEAD answer by the method and
never show a Content-Length or stray bytes after it. Every case is sent as a connection's
first head (screened by the intake before libmicrohttpd reads it) and as a later head on a
kept-alive connection (read by libmicrohttpd)."""
import json
import re
import socket
import threading

import pytest

from fleet_helpers import read_head


def wide(catalog, name="wide"):
    catalog.plan(name, "--rate", "1000000/min")
    return catalog.user_key(name)[1]


# --------------------------------------------------------------------------------------
# a raw upstream: what it sends is exactly what each case needs

class RawUpstream:
    """Keeps connections alive and answers by path:
    /nolen          200 without Content-Length (GET: "hello", then it closes)
    /len/<n>        200 with Content-Length n (GET: n bytes "x")
    /304            304 with an ETag and no Content-Length
    /304len/<n>     304 with Content-Length n (the 200's length, RFC 9110 8.6)
    /204            204, nothing else
    /101            101 to websocket (asked for or not), then nothing
    anything else   200 with a JSON echo {method, path, headers, body}, Content-Length."""

    def __init__(self):
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.conns = []
        self.requests = []
        self.lock = threading.Lock()
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            self.conns.append(c)
            threading.Thread(target=self.session, args=(c,), daemon=True).start()

    def read_request(self, c, buf):
        while b"\r\n\r\n" not in buf:
            chunk = c.recv(65536)
            if not chunk:
                return None, b""
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        method, path, _ = lines[0].split(" ", 2)
        headers = [tuple(x.strip() for x in ln.split(":", 1)) for ln in lines[1:]]
        fields = {k.lower(): v for k, v in headers}
        body = b""
        if "chunked" in fields.get("transfer-encoding", "").lower():
            while True:
                while b"\r\n" not in buf:
                    buf += c.recv(65536)
                line, _, buf = buf.partition(b"\r\n")
                size = int(line.split(b";")[0], 16)
                while len(buf) < size + 2:
                    buf += c.recv(65536)
                body += buf[:size]
                buf = buf[size + 2:]
                if size == 0:
                    break
        else:
            n = int(fields.get("content-length", "0"))
            while len(buf) < n:
                buf += c.recv(65536)
            body, buf = buf[:n], buf[n:]
        return (method, path, headers, body), buf

    def session(self, c):
        buf = b""
        try:
            while True:
                req, buf = self.read_request(c, buf)
                if req is None:
                    return
                with self.lock:
                    self.requests.append(req)
                if not self.answer(c, *req):
                    c.close()
                    return
        except OSError:
            pass

    def answer(self, c, method, path, headers, body):
        """Sends the answer; False when the connection ends with it."""
        head = method == "HEAD"
        m = re.match(r"/len/(\d+)$", path)
        if path == "/nolen":
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\n" + (b"" if head else b"hello"))
            return head
        if m:
            n = int(m.group(1))
            c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n + (b"" if head else b"x" * n))
            return True
        if path == "/304":
            c.sendall(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\n\r\n")
            return True
        m = re.match(r"/304len/(\d+)$", path)
        if m:
            c.sendall(b"HTTP/1.1 304 Not Modified\r\nETag: \"v1\"\r\nContent-Length: %s\r\n\r\n"
                      % m.group(1).encode())
            return True
        if path == "/204":
            c.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
            return True
        if path == "/101":
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
            c.settimeout(10)
            while c.recv(65536):
                pass
            return False
        echo = json.dumps({"method": method, "path": path, "headers": headers,
                           "body": body.decode("latin-1")}).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                  % len(echo) + (b"" if head else echo))
        return True

    def count(self):
        with self.lock:
            return len(self.requests)

    def close(self):
        self.srv.close()
        for c in self.conns:
            try:
                c.close()
            except OSError:
                pass


@pytest.fixture
def raw_up():
    u = RawUpstream()
    yield u
    u.close()


# --------------------------------------------------------------------------------------
# the client side: one kept-alive connection, answers read by the rules a client follows

class Answer:
    def __init__(self, status, headers, body, closed):
        self.status = status
        self.headers = headers
        self.body = body
        self.closed = closed      # the proxy closed the connection after it

    def header(self, name):
        got = [v for k, v in self.headers if k.lower() == name.lower()]
        return got[0] if got else None

    def has(self, name):
        return any(k.lower() == name.lower() for k, _ in self.headers)

    def __repr__(self):
        return "<%s %r %r closed=%s>" % (self.status, self.headers, self.body[:300], self.closed)


class Conn:
    """A raw client connection. ask() sends bytes and reads one answer as a client must
    (RFC 9112 6.3: HEAD, 1xx, 204 and 304 end at their head), then checks whether anything
    else came: a stray byte after a bodiless answer would be read as the next answer."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def ask(self, data, head=False):
        try:
            self.s.sendall(data)
        except OSError:
            pass      # answered and closed before everything was read
        status, headers, rest = read_head(self.s, self.buf)
        self.buf = b""
        fields = {k.lower(): v for k, v in headers}
        buf = rest
        if head or status in (204, 304) or status < 200:
            body = b""
        elif "content-length" in fields:
            n = int(fields["content-length"])
            while len(buf) < n:
                chunk = self.s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            body, buf = buf[:n], buf[n:]
        elif "chunked" in fields.get("transfer-encoding", "").lower():
            body = b""
            while True:
                while b"\r\n" not in buf:
                    buf += self.s.recv(65536)
                size_line, _, buf = buf.partition(b"\r\n")
                size = int(size_line.split(b";")[0], 16)
                while len(buf) < size + 2:
                    buf += self.s.recv(65536)
                body += buf[:size]
                buf = buf[size + 2:]
                if size == 0:
                    break
        else:
            while True:
                chunk = self.s.recv(65536)
                if not chunk:
                    break
                buf += chunk
            body, buf = buf, b""
        closed, extra = self.after(buf)
        assert extra == b"", "bytes after the answer %s %r: %r" % (status, headers, extra[:200])
        return Answer(status, headers, body, closed)

    def after(self, buf, wait=0.3):
        """(closed, bytes that came after the answer within `wait` seconds)."""
        self.s.settimeout(wait)
        extra = buf
        closed = False
        try:
            while True:
                chunk = self.s.recv(65536)
                if not chunk:
                    closed = True
                    break
                extra += chunk
        except socket.timeout:
            pass
        except ConnectionError:
            closed = True
        self.s.settimeout(5)
        return closed, extra

    def close(self):
        self.s.close()


def req(method, target, key, version=b"HTTP/1.1", host=b"t", extra=b"", body=b""):
    h = method + b" " + target + b" " + version + b"\r\n"
    if host is not None:
        h += b"Host: " + host + b"\r\n"
    return h + b"Authorization: Bearer " + key.encode() + b"\r\n" + extra + b"\r\n" + body


def first_and_later(p, key, data, head=False):
    """The answer to `data` as a connection's first head and as a later head after a good
    request on a kept-alive connection."""
    c = Conn(p.port)
    try:
        a1 = c.ask(data, head=head)
    finally:
        c.close()
    c = Conn(p.port)
    try:
        good = c.ask(req(b"GET", b"/good", key))
        assert good.status == 200 and not good.closed, good
        a2 = c.ask(data, head=head)
    finally:
        c.close()
    return [("first", a1), ("later", a2)]


def assert_problem(a, status, error_code):
    """An RFC 9457 problem body (application/problem+json) and Connection: close, and the
    connection closed after it."""
    assert a.status == status, "expected %d, got %r" % (status, a)
    ct = (a.header("Content-Type") or "").split(";")[0].strip().lower()
    assert ct == "application/problem+json", "not a problem+json answer: %r" % a
    body = json.loads(a.body)
    for member in ("type", "title", "detail"):
        assert isinstance(body.get(member), str) and body[member], (member, body)
    assert body["status"] == status and body["error_code"] == error_code, body
    assert (a.header("Connection") or "").lower() == "close", a
    assert a.closed, "the connection stayed open after %r" % a


# --------------------------------------------------------------------------------------
# 1. HEAD, 304 and 204 carry no Content-Length the upstream did not send (RFC 9110 8.6)

@pytest.mark.parametrize("method,target,status", [
    (b"HEAD", b"/nolen", 200), (b"GET", b"/304", 304), (b"HEAD", b"/304", 304),
    (b"GET", b"/204", 204), (b"HEAD", b"/204", 204),
])
def test_bodiless_answers_get_no_content_length_of_the_proxys_own(catalog, proxies, raw_up, method, target,
                                                                  status):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    head = method == b"HEAD"
    for where, a in first_and_later(p, key, req(method, target, key), head=head):
        assert a.status == status, (where, a)
        assert not a.has("Content-Length"), \
            "%s %s (%s head): Content-Length the upstream did not send: %r" % (method, target, where, a)
        if status == 304:
            assert a.header("ETag") == '"v1"', (where, a)
        if status == 204:
            assert not a.closed, (where, a)
        elif a.closed:
            # unframed, so the connection ends with it, and says so
            assert (a.header("Connection") or "").lower() == "close", (where, a)
    # the framing is right: the next request on the connection gets its own answer
    c = Conn(p.port)
    try:
        for i in range(3):
            a = c.ask(req(method, target, key), head=head)
            assert a.status == status and not a.has("Content-Length"), (i, a)
            if a.closed:
                break
            nxt = c.ask(req(b"GET", b"/next%d" % i, key))
            assert nxt.status == 200 and json.loads(nxt.body)["path"] == "/next%d" % i, (i, nxt)
    finally:
        c.close()


@pytest.mark.parametrize("method,target,length", [
    (b"HEAD", b"/len/1234", b"1234"), (b"HEAD", b"/len/0", b"0"), (b"GET", b"/304len/77", b"77"),
    (b"HEAD", b"/304len/77", b"77"),
])
def test_a_content_length_the_upstream_sent_passes_unchanged(catalog, proxies, raw_up, method, target, length):
    """RFC 9110 9.3.2 and 15.4.5: a HEAD answer and a 304 may carry the length a GET's 200
    would have; the proxy passes the upstream's on as it came, and keeps the connection."""
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    for where, a in first_and_later(p, key, req(method, target, key), head=method == b"HEAD"):
        got = [v for k, v in a.headers if k.lower() == "content-length"]
        assert got == [length.decode()], (where, a)
        assert a.body == b"" and not a.closed, (where, a)


def test_head_answers_for_an_http_1_0_client(catalog, proxies, raw_up):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    c = Conn(p.port)
    try:
        a = c.ask(req(b"HEAD", b"/nolen", key, version=b"HTTP/1.0"), head=True)
    finally:
        c.close()
    assert a.status == 200 and not a.has("Content-Length") and not a.has("Transfer-Encoding"), a


# --------------------------------------------------------------------------------------
# 2. an HTTP/1.1 request without Host is 400 (RFC 9112 3.2); HTTP/1.0 needs none

@pytest.mark.parametrize("version", [b"HTTP/1.1", b"HTTP/1.2"])
def test_an_http_1_1_request_without_host_is_400(catalog, proxies, raw_up, version):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    for target in (b"/nohost", b"http://api.example/nohost"):
        for where, a in first_and_later(p, key, req(b"GET", target, key, version=version, host=None)):
            assert_problem(a, 400, "malformed_request")
    # only the good requests of the kept-alive connections reached the upstream
    assert [r[1] for r in raw_up.requests] == ["/good", "/good"], raw_up.requests


def test_an_http_1_0_request_without_host_is_served(catalog, proxies, raw_up):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    a = first_and_later(p, key, req(b"GET", b"/old", key, version=b"HTTP/1.0", host=None))
    for where, ans in a:
        assert ans.status == 200 and json.loads(ans.body)["path"] == "/old", (where, ans)


# --------------------------------------------------------------------------------------
# 3. Transfer-Encoding: chunked last, or 400 and close (RFC 9112 6.1, 6.3)

CHUNKED_BODY = b"5\r\nhello\r\n0\r\n\r\n"

REFUSED_CODINGS = [
    ("chunked, gzip", b"Transfer-Encoding: chunked, gzip\r\n", 400),
    ("gzip", b"Transfer-Encoding: gzip\r\n", 400),
    ("identity", b"Transfer-Encoding: identity\r\n", 400),
    ("chunked, chunked", b"Transfer-Encoding: chunked, chunked\r\n", 400),
    ("chunked on two lines", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", 400),
    ("chunked, then gzip on a second line", b"Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", 400),
    ("empty", b"Transfer-Encoding: \r\n", 400),
    ("only a comma", b"Transfer-Encoding: ,\r\n", 400),
    ("chunked with a parameter", b"Transfer-Encoding: chunked;x=1\r\n", 400),
    ("gzip, chunked", b"Transfer-Encoding: gzip, chunked\r\n", 501),
    ("gzip then chunked on two lines", b"Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 501),
]


@pytest.mark.parametrize("what", [c[0] for c in REFUSED_CODINGS])
def test_a_transfer_encoding_not_ending_in_chunked_is_400_and_closed(catalog, proxies, raw_up, what):
    extra, status = {c[0]: (c[1], c[2]) for c in REFUSED_CODINGS}[what]
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    code = "malformed_request" if status == 400 else "unsupported_transfer_coding"
    for where, a in first_and_later(p, key, req(b"POST", b"/te", key, extra=extra, body=CHUNKED_BODY)):
        assert_problem(a, status, code)
    # only the good request of the kept-alive connection reached the upstream
    assert [r[1] for r in raw_up.requests] == ["/good"], raw_up.requests


def test_transfer_encoding_in_http_1_0_is_400_and_closed(catalog, proxies, raw_up):
    """RFC 9112 6.1: an HTTP/1.0 message with Transfer-Encoding has faulty framing."""
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    data = req(b"POST", b"/te", key, version=b"HTTP/1.0", extra=b"Transfer-Encoding: chunked\r\n",
               body=CHUNKED_BODY)
    for where, a in first_and_later(p, key, data):
        assert_problem(a, 400, "malformed_request")
    assert [r[1] for r in raw_up.requests] == ["/good"], raw_up.requests


@pytest.mark.parametrize("coding", [b"chunked", b"Chunked", b"CHUNKED"])
def test_chunked_in_any_case_is_read_and_forwarded(catalog, proxies, raw_up, coding):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    data = req(b"POST", b"/te", key, extra=b"Transfer-Encoding: " + coding + b"\r\n", body=CHUNKED_BODY)
    for where, a in first_and_later(p, key, data):
        assert a.status == 200 and not a.closed, (where, a)
        assert json.loads(a.body)["body"] == "hello", (where, a)


# --------------------------------------------------------------------------------------
# 4. HTTP/1.x is HTTP/1.1; other majors 505; HTTP/1.10 is no version (RFC 9112 2.3)

@pytest.mark.parametrize("version", [b"HTTP/1.2", b"HTTP/1.9"])
def test_other_1_x_minor_versions_are_served_as_http_1_1(catalog, proxies, raw_up, version):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    c = Conn(p.port)
    try:
        for i in range(3):      # the first head, then later ones on the same connection
            c.s.sendall(req(b"GET", b"/v%d" % i, key, version=version))
            c.s.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                data += c.s.recv(65536)
            assert data.startswith(b"HTTP/1.1 200 "), (version, i, data[:200])
            c.buf = data
            a = c.ask(b"")
            assert json.loads(a.body)["path"] == "/v%d" % i and not a.closed, (version, i, a)
            # what the upstream got is an HTTP/1.1 request (curl's)
    finally:
        c.close()
    assert [r[1] for r in raw_up.requests] == ["/v0", "/v1", "/v2"], raw_up.requests


@pytest.mark.parametrize("version,status", [(b"HTTP/2.0", 505), (b"HTTP/3.0", 505), (b"HTTP/1.10", 400)])
def test_other_versions_are_refused_on_every_head(catalog, proxies, raw_up, version, status):
    key = wide(catalog)
    p = proxies.start(catalog, upstream=raw_up)
    for where, a in first_and_later(p, key, req(b"GET", b"/v", key, version=version)):
        assert a.status == status, (where, a)
        assert (a.header("Connection") or "").lower() == "close" and a.closed, (where, a)
    assert [r[1] for r in raw_up.requests] == ["/good"], raw_up.requests


# --------------------------------------------------------------------------------------
# 5. SPEC "Faults keep their promises": "An upstream 101 without Upgrade: websocket and a
# valid Sec-WebSocket-Accept is a 502" (test_fault_heads.py holds the handshake's cases):
# also a 101 to a request that asked for no upgrade (RFC 9110 15.2.2), which has neither

def test_an_upstream_101_to_a_plain_request_is_502(catalog, proxies, raw_up):
    key = wide(catalog)
    # a 504 would come after upstream_timeout_ms: the 502 must not wait for it
    p = proxies.start(catalog, upstream=raw_up, proxy={"upstream_timeout_ms": 3000})
    for where, a in first_and_later(p, key, req(b"GET", b"/101", key)):
        assert a.status == 502, (where, a)
        assert json.loads(a.body)["error_code"] == "bad_upstream_response", (where, a)
