"""SPEC "Clients as they are": a refusal (401, 429, 503) of a request that announced no body
keeps the connection open; only a request whose announced body was not read is answered with
`Connection: close`. Raw sockets, so that what is on the wire is what is checked: the answer's
Connection field, and whether the same socket carries the next request."""
import json
import re
import socket
import threading

import pytest

from conftest import parse_raw_response

# Generous: an answer comes in milliseconds; a socket the proxy keeps open stays quiet.
ANSWER_WITHIN_S = 5.0
QUIET_S = 1.0


class Conn:
    """One client connection read answer by answer (whatever came after one stays buffered)."""

    def __init__(self, p):
        self.s = socket.create_connection(("127.0.0.1", p.port), timeout=ANSWER_WITHIN_S)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise ConnectionError("closed by the proxy")
        self.buf += chunk

    def answer(self):
        """The next final answer (interim 1xx answers skipped) and whether a 100 Continue
        came before it."""
        saw_continue = False
        while True:
            while b"\r\n\r\n" not in self.buf:
                self._fill()
            head, _, rest = self.buf.partition(b"\r\n\r\n")
            if head.startswith(b"HTTP/1.1 1"):
                saw_continue |= head.startswith(b"HTTP/1.1 100")
                self.buf = rest
                continue
            m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
            n = int(m.group(1)) if m else 0
            while len(rest) < n:
                self._fill()
                rest = self.buf.partition(b"\r\n\r\n")[2]
            self.buf = rest[n:]
            return parse_raw_response(head + b"\r\n\r\n" + rest[:n]), saw_continue

    def closed(self, timeout=ANSWER_WITHIN_S):
        """True when the proxy closes the connection within timeout (what it sends meanwhile
        is dropped); False when it stays open and quiet."""
        self.s.settimeout(timeout)
        try:
            while self.s.recv(65536):
                pass
            return True
        except socket.timeout:
            return False
        except ConnectionError:
            return True

    def close(self):
        self.s.close()


def get(target, key=None, extra=b"", version=b"HTTP/1.1"):
    h = b"GET " + target + b" " + version + b"\r\nHost: t\r\n"
    if key:
        h += b"Authorization: Bearer " + key.encode() + b"\r\n"
    return h + extra + b"\r\n"


def post(target, key=None, length=None, chunked=False, expect=False):
    h = b"POST " + target + b" HTTP/1.1\r\nHost: t\r\n"
    if key:
        h += b"Authorization: Bearer " + key.encode() + b"\r\n"
    if length is not None:
        h += b"Content-Length: %d\r\n" % length
    if chunked:
        h += b"Transfer-Encoding: chunked\r\n"
    if expect:
        h += b"Expect: 100-continue\r\n"
    return h + b"\r\n"


def error_code(r):
    """The error_code of an error answer (the JSON body and the problem body both carry it)."""
    return json.loads(r.body)["error_code"]


def connection_tokens(r):
    return [t.strip().lower() for v in r.header_all("Connection") for t in v.split(",")]


def assert_kept_open(r, what):
    assert "close" not in connection_tokens(r), \
        "%s: the refusal of a request that announced no body says Connection: close: %r" % (what, r)


def assert_closing(c, r, what):
    assert "close" in connection_tokens(r), \
        "%s: a request whose announced body was not read, answered without Connection: close: %r" % (what, r)
    assert c.closed(), "%s: the connection stayed open after the refusal" % what


def assert_next_served(c, key, what):
    """The same socket carries the next request and gets the upstream's answer."""
    try:
        c.send(get(b"/after-refusal", key=key))
        r, _ = c.answer()
    except (ConnectionError, socket.timeout) as e:
        raise AssertionError("%s: the next request on the same connection got no answer (%s)" % (what, e))
    assert r.status == 200 and r.echo["path"] == "/after-refusal", (what, r)


def open_and_used_up(catalog):
    """A key of an open plan, and one of a plan with one request a minute, used up once
    the caller has sent it one request."""
    catalog.plan("open", "--rate", "1000000/min")
    catalog.plan("one", "--rate", "1/min")
    return catalog.user_key("open")[1], catalog.user_key("one")[1]


def used_up(p, key):
    c = Conn(p)
    try:
        c.send(get(b"/spend", key=key))
        assert c.answer()[0].status == 200
    finally:
        c.close()


# --------------------------------------------------------------------------------------
# no body announced: the connection stays open

@pytest.mark.parametrize("store", ["memory", "redis"])
def test_429_of_a_get_keeps_the_connection(catalog, proxies, store):
    """memory decides within the head's first call; redis after the connection was
    suspended and resumed, in the first call's repetition."""
    open_key, one_key = open_and_used_up(catalog)
    p = proxies.start(catalog, store=store)
    used_up(p, one_key)
    c = Conn(p)
    try:
        for i in range(3):   # the refusal, on and on, and between them an admitted request
            c.send(get(b"/limited", key=one_key))
            r, _ = c.answer()
            assert r.status == 429 and error_code(r) == "rate_limit_exceeded", r
            assert_kept_open(r, "429 #%d" % i)
            assert_next_served(c, open_key, "after 429 #%d" % i)
    finally:
        c.close()


def test_401_of_a_get_keeps_the_connection(catalog, proxies):
    open_key, _ = open_and_used_up(catalog)
    p = proxies.start(catalog)
    c = Conn(p)
    try:
        for key, code in ((None, "missing_api_key"), ("tp_live_not_a_key", "invalid_api_key")):
            c.send(get(b"/who", key=key))
            r, _ = c.answer()
            assert r.status == 401 and error_code(r) == code, r
            assert r.header("WWW-Authenticate"), r
            assert_kept_open(r, code)
            assert_next_served(c, open_key, code)
    finally:
        c.close()


def test_503_store_down_keeps_the_connection(catalog, proxies, redis_factory):
    catalog.plan("rateonly", "--rate", "1000/min")
    key = catalog.user_key("rateonly")[1]
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, limits={"on_store_error": "closed"})
    c = Conn(p)
    try:
        c.send(get(b"/before", key=key))
        assert c.answer()[0].status == 200
        rd.stop()
        for i in range(3):
            c.send(get(b"/during", key=key))
            r, _ = c.answer()
            assert r.status == 503 and error_code(r) == "limiter_unavailable", r
            assert_kept_open(r, "503 #%d" % i)
        assert not c.closed(QUIET_S), "the connection was closed after the 503s"
    finally:
        c.close()


def test_pipelined_requests_behind_refusals_are_answered_in_order(catalog, proxies):
    open_key, one_key = open_and_used_up(catalog)
    p = proxies.start(catalog)
    used_up(p, one_key)
    c = Conn(p)
    try:
        c.send(get(b"/a") + get(b"/b", key=one_key) + get(b"/c", key=open_key)
               + get(b"/d", key="tp_live_not_a_key") + get(b"/e", key=open_key))
        got = [c.answer()[0] for _ in range(5)]
        assert [r.status for r in got] == [401, 429, 200, 401, 200], got
        assert got[2].echo["path"] == "/c" and got[4].echo["path"] == "/e", got
        for r in got:
            assert_kept_open(r, "pipelined %d" % r.status)
        assert not c.closed(QUIET_S), "the connection was closed after the pipelined requests"
    finally:
        c.close()


def test_content_length_0_is_no_body(catalog, proxies):
    open_key, one_key = open_and_used_up(catalog)
    p = proxies.start(catalog)
    used_up(p, one_key)
    c = Conn(p)
    try:
        for key, status in ((None, 401), (one_key, 429)):
            c.send(post(b"/empty", key=key, length=0))
            r, saw_continue = c.answer()
            assert r.status == status and not saw_continue, r
            assert_kept_open(r, "POST Content-Length: 0, %d" % status)
            assert_next_served(c, open_key, "POST Content-Length: 0, %d" % status)
    finally:
        c.close()


def test_expect_continue_refusal_gets_no_continue(catalog, proxies):
    """Expect: 100-continue with no body to send: a refused request still gets no 100
    Continue. libmicrohttpd sends one for any Expect unless the answer is queued on the
    head's first call, which closes the connection: closed it is (clients send Expect only
    with a body, which then is not read anyway)."""
    open_and_used_up(catalog)
    p = proxies.start(catalog)
    c = Conn(p)
    try:
        c.send(post(b"/empty", length=0, expect=True))
        r, saw_continue = c.answer()
        assert r.status == 401 and not saw_continue, r
        assert_closing(c, r, "Expect with Content-Length: 0")
    finally:
        c.close()


def test_http_1_0_keep_alive_refusal_keeps_the_connection(catalog, proxies):
    open_key, _ = open_and_used_up(catalog)
    p = proxies.start(catalog)
    c = Conn(p)
    try:
        c.send(get(b"/old", version=b"HTTP/1.0", extra=b"Connection: keep-alive\r\n"))
        r, _ = c.answer()
        assert r.status == 401, r
        assert "keep-alive" in connection_tokens(r), r
        assert_next_served(c, open_key, "HTTP/1.0 keep-alive 401")
    finally:
        c.close()
    # HTTP/1.0 without keep-alive closes, as any HTTP/1.0 answer does
    c = Conn(p)
    try:
        c.send(get(b"/old", version=b"HTTP/1.0"))
        r, _ = c.answer()
        assert r.status == 401, r
        assert c.closed(), "an HTTP/1.0 connection without keep-alive stayed open"
    finally:
        c.close()


def test_refused_websocket_handshake_keeps_the_connection(catalog, proxies):
    open_key, _ = open_and_used_up(catalog)
    p = proxies.start(catalog)
    c = Conn(p)
    try:
        c.send(get(b"/ws", extra=b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                                  b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                                  b"Sec-WebSocket-Version: 13\r\n"))
        r, _ = c.answer()
        assert r.status == 401, r
        assert_kept_open(r, "refused handshake")
        assert_next_served(c, open_key, "refused handshake")
    finally:
        c.close()


# --------------------------------------------------------------------------------------
# a body announced and not read: Connection: close, and the connection closes

def test_refusal_of_an_unread_body_closes(catalog, proxies):
    open_key, one_key = open_and_used_up(catalog)
    p = proxies.start(catalog)
    used_up(p, one_key)
    cases = [
        ("401 Content-Length", post(b"/up", length=1000), 401),
        ("401 chunked", post(b"/up", chunked=True), 401),
        ("429 Content-Length", post(b"/up", key=one_key, length=1000), 429),
        ("429 chunked", post(b"/up", key=one_key, chunked=True), 429),
        ("429 Expect: 100-continue", post(b"/up", key=one_key, length=1000, expect=True), 429),
    ]
    for what, head, status in cases:
        c = Conn(p)
        try:
            c.send(head)
            r, saw_continue = c.answer()
            assert r.status == status, (what, r)
            assert not saw_continue, "%s: 100 Continue sent to a refused request" % what
            assert_closing(c, r, what)
        finally:
            c.close()


def test_refusal_while_the_body_keeps_coming_closes(catalog, proxies):
    _, one_key = open_and_used_up(catalog)
    p = proxies.start(catalog)
    used_up(p, one_key)
    c = Conn(p)
    stop = threading.Event()

    def keep_sending():
        try:
            while not stop.is_set():
                c.send(b"x" * 65536)
        except OSError:
            pass   # the proxy closed: what the client still sends has nowhere to go

    try:
        c.send(post(b"/up", key=one_key, length=8 * 1024 * 1024))
        t = threading.Thread(target=keep_sending, daemon=True)
        t.start()
        r, _ = c.answer()
        assert r.status == 429, r
        assert_closing(c, r, "429 while the body keeps coming")
    finally:
        stop.set()
        c.close()
