"""The request flow (SPEC "One request model"): the decision is made when the head has
arrived, before any body byte is read; `100 Continue` goes only to an admitted request;
every head on a connection is screened alike; an upstream head over 64 KiB or malformed is
a 502 the access log records."""
import json
import re
import socket
import struct
import threading
import time

import pytest

from conftest import SANITIZED, VALGRIND, assert_json_error, parse_raw_response, raw_exchange, read_answer
from upstream import exact_head

TEN_MIB = 10 * 1024 * 1024
# Generous: an answer "at once" comes in milliseconds; the old flow never answers these
# before the body is complete, so any bound the test can wait out tells the two apart.
ANSWER_WITHIN_S = 3.0


def wide(catalog, name="wide", *flags):
    catalog.plan(name, "--rate", "1000000/min", *flags)
    return catalog.user_key(name)[1]


def open_head(p, head):
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    s.sendall(head)
    return s


def read_until_quiet(s, timeout=ANSWER_WITHIN_S):
    """What the server sends until it closes, or until nothing more comes for `timeout`."""
    s.settimeout(timeout)
    out = b""
    closed = False
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                closed = True
                break
            out += chunk
    except socket.timeout:
        pass
    except ConnectionError:
        closed = True
    return out, closed


def one_answer(out):
    """The first final answer in out, parsed (interim 1xx answers skipped), and whether a
    100 Continue came before it."""
    saw_continue = False
    while out.startswith(b"HTTP/1.1 1"):
        saw_continue |= out.startswith(b"HTTP/1.1 100")
        out = out.partition(b"\r\n\r\n")[2]
    assert out.startswith(b"HTTP/1."), "no final answer: %r" % out[:300]
    h, sep, rest = out.partition(b"\r\n\r\n")
    m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", h)
    n = int(m.group(1)) if m else len(rest)
    return parse_raw_response(h + sep + rest[:n]), saw_continue


def post_head(target, length=None, key=None, expect=False, chunked=False, method=b"POST"):
    h = method + b" " + target + b" HTTP/1.1\r\nHost: t\r\n"
    if key:
        h += b"Authorization: Bearer " + key.encode() + b"\r\n"
    if length is not None:
        h += b"Content-Length: %d\r\n" % length
    if chunked:
        h += b"Transfer-Encoding: chunked\r\n"
    if expect:
        h += b"Expect: 100-continue\r\n"
    return h + b"\r\n"


def assert_refused_at_once(p, head, status, code, body_prefix=b""):
    """head (and body_prefix) sent, the rest of the body never: the answer is `status` with
    `code`, without a 100 Continue, with Connection: close, and the connection then closes."""
    s = open_head(p, head)
    try:
        if body_prefix:
            try:
                s.sendall(body_prefix)
            except OSError:
                pass   # answered and closed while the prefix was still going
        out, closed = read_until_quiet(s)
    finally:
        s.close()
    assert out, "no answer before the body was complete"
    r, saw_continue = one_answer(out)
    assert not saw_continue, "100 Continue sent to a request that is refused: %r" % out[:300]
    assert assert_json_error(r, status)["error_code"] == code, r
    assert (r.header("Connection") or "").lower() == "close", r
    assert closed, "the connection stayed open after the refusal"
    return r


# --------------------------------------------------------------------------------------
# 1. decided at head time

def test_keyless_expect_continue_gets_401_without_body(catalog, proxies):
    wide(catalog)
    p = proxies.start(catalog)
    assert_refused_at_once(p, post_head(b"/upload", TEN_MIB, expect=True), 401, "missing_api_key")


def test_keyless_partial_body_gets_401_at_once(catalog, proxies):
    wide(catalog)
    p = proxies.start(catalog)
    assert_refused_at_once(p, post_head(b"/upload", TEN_MIB), 401, "missing_api_key",
                           body_prefix=b"x" * (1024 * 1024))
    assert_refused_at_once(p, post_head(b"/upload", TEN_MIB, key="tp_live_not_a_key"), 401,
                           "invalid_api_key", body_prefix=b"x" * (1024 * 1024))


def vm_rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    raise AssertionError("no VmRSS")


def test_keyless_bodies_are_not_held_in_memory(catalog, proxies):
    wide(catalog)
    p = proxies.start(catalog)
    p.get("/warm")   # the first request's one-off allocations are not the bodies'
    before = vm_rss_kib(p.proc.pid)
    socks = []

    def push(s):
        s.settimeout(ANSWER_WITHIN_S)
        chunk = b"y" * 65536
        left = TEN_MIB - 1
        try:
            while left > 0:
                n = min(left, len(chunk))
                s.sendall(chunk[:n])
                left -= n
        except OSError:
            pass   # refused and closed, or the proxy stopped reading: either way done
    threads = []
    for _ in range(4):
        s = open_head(p, post_head(b"/upload", TEN_MIB))
        socks.append(s)
        t = threading.Thread(target=push, args=(s,))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(60)
    time.sleep(0.3)
    grown_kib = vm_rss_kib(p.proc.pid) - before
    answers = [read_until_quiet(s, 1.0)[0] for s in socks]
    for s in socks:
        s.close()
    assert grown_kib < 8 * 1024, "RSS grew by %d KiB for 4 keyless bodies held open" % grown_kib
    for out in answers:
        assert out.startswith(b"HTTP/1.1 401"), out[:200]


def test_over_limit_user_gets_429_before_body(catalog, proxies):
    catalog.plan("tight", "--rate", "1/min")
    key = catalog.user_key("tight")[1]
    p = proxies.start(catalog)
    assert p.get("/first", key=key).status == 200
    r = assert_refused_at_once(p, post_head(b"/upload", TEN_MIB, key=key, expect=True), 429,
                               "rate_limit_exceeded")
    assert r.header("Retry-After") is not None, r
    assert_refused_at_once(p, post_head(b"/upload", TEN_MIB, key=key), 429, "rate_limit_exceeded",
                           body_prefix=b"z" * 65536)


def test_over_limit_on_redis_gets_429_before_body(catalog, proxies):
    catalog.plan("tight", "--rate", "1/min")
    key = catalog.user_key("tight")[1]
    p = proxies.start(catalog, store="redis")
    assert p.get("/first", key=key).status == 200
    assert_refused_at_once(p, post_head(b"/upload", TEN_MIB, key=key, expect=True), 429,
                           "rate_limit_exceeded")


def test_content_length_over_max_body_gets_413_at_once(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog, proxy={"max_body_bytes": 1000})
    assert_refused_at_once(p, post_head(b"/upload", 1001, key=key, expect=True), 413,
                           "request_too_large")


def test_keyless_chunked_body_that_never_ends_gets_401(catalog, proxies):
    wide(catalog)
    p = proxies.start(catalog)
    assert_refused_at_once(p, post_head(b"/upload", chunked=True), 401, "missing_api_key",
                           body_prefix=b"1000\r\n" + b"c" * 4096 + b"\r\n")


def test_over_size_chunked_body_gets_413_before_its_end(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog, proxy={"max_body_bytes": 100000})
    chunk = b"2000\r\n" + b"c" * 0x2000 + b"\r\n"
    s = open_head(p, post_head(b"/upload", key=key, chunked=True))
    try:
        try:
            for _ in range(20):   # 160 KiB, never the last chunk
                s.sendall(chunk)
        except OSError:
            pass
        out, _ = read_until_quiet(s)
    finally:
        s.close()
    assert out, "no answer before the chunked body ended"
    r, _ = one_answer(out)
    assert_json_error(r, 413, {"error_code": "request_too_large"})
    assert (r.header("Connection") or "").lower() == "close", r


def test_admitted_request_gets_continue_then_its_answer(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    body = bytes(range(256)) * 4096   # 1 MiB
    s = open_head(p, post_head(b"/upload", len(body), key=key, expect=True))
    try:
        s.settimeout(ANSWER_WITHIN_S)
        interim = b""
        while b"\r\n\r\n" not in interim:
            got = s.recv(4096)
            assert got, "closed before 100 Continue"
            interim += got
        assert interim.startswith(b"HTTP/1.1 100"), interim
        s.sendall(body)
        out, _ = read_until_quiet(s, 5.0)
    finally:
        s.close()
    r, _ = one_answer(interim.partition(b"\r\n\r\n")[2] + out)
    assert r.status == 200, r
    import hashlib
    e = json.loads(r.body)
    assert e["length"] == len(body) and e["body_sha256"] == hashlib.sha256(body).hexdigest()


def test_store_down_closed_gets_503_before_body(catalog, proxies, redis_factory):
    key = wide(catalog)
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd, limits={"on_store_error": "closed"})
    assert p.get("/before", key=key).status == 200
    rd.stop()
    assert_refused_at_once(p, post_head(b"/upload", TEN_MIB, key=key, expect=True), 503,
                           "limiter_unavailable")


def test_refusals_at_head_time_are_logged(catalog, proxies):
    wide(catalog)
    p = proxies.start(catalog)
    assert_refused_at_once(p, post_head(b"/logged", TEN_MIB, expect=True), 401, "missing_api_key")
    lines = []

    def logged():
        lines[:] = [e for e in p.access_log_lines() if e.get("path") == "/logged"]
        return lines
    deadline = time.monotonic() + 5
    while not logged() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(lines) == 1 and lines[0]["status"] == 401, lines


# --------------------------------------------------------------------------------------
# 2. every head screened alike

BAD_HEADS = {
    "lowercase method": b"post /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n",
    "tab in target": b"GET /a\tb HTTP/1.1\r\nHost: t\r\n",
    "control char in value": b"GET /ctl HTTP/1.1\r\nHost: t\r\nX-A: a\x01b\r\n",
    "two Host fields": b"GET /hosts HTTP/1.1\r\nHost: t\r\nHost: u\r\n",
}


def with_key(head, key):
    return head + b"Authorization: Bearer " + key.encode() + b"\r\n\r\n"


def upstream_requests(u):
    return u.stats()["requests"]


def test_later_heads_are_screened(catalog, proxies, upstream_factory):
    key = wide(catalog)
    u = upstream_factory()
    p = proxies.start(catalog, upstream=u)
    for name, bad in BAD_HEADS.items():
        s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
        try:
            s.sendall(with_key(b"GET /good HTTP/1.1\r\nHost: t\r\n", key))
            s.settimeout(5)
            first = b""
            while True:
                got = s.recv(65536)
                assert got, "%s: closed after the good request" % name
                first += got
                try:
                    r, _ = one_answer(first)
                except AssertionError:
                    continue
                if len(r.body) >= int(r.header("Content-Length") or 0):
                    break
            assert r.status == 200, (name, r)
            served = upstream_requests(u)
            s.sendall(with_key(bad, key))
            out, _ = read_until_quiet(s)
        finally:
            s.close()
        assert out, "%s: no answer to the second head" % name
        r, _ = one_answer(out)
        assert_json_error(r, 400)
        assert upstream_requests(u) == served, "%s reached the upstream" % name


def test_first_heads_are_screened(catalog, proxies, upstream_factory):
    key = wide(catalog)
    u = upstream_factory()
    p = proxies.start(catalog, upstream=u)
    served = upstream_requests(u)
    for name, bad in BAD_HEADS.items():
        s = open_head(p, with_key(bad, key))
        try:
            out, _ = read_until_quiet(s)
        finally:
            s.close()
        assert out, "%s: no answer" % name
        r, _ = one_answer(out)
        assert_json_error(r, 400)
        assert upstream_requests(u) == served, "%s reached the upstream" % name
    assert p.get("/still-fine", key=key).status == 200


# --------------------------------------------------------------------------------------
# 3. the upstream's head

def test_upstream_head_over_64k_is_502(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    r = p.get("/bighead/100000", key=key)
    assert_json_error(r, 502, {"error_code": "bad_upstream_response"})
    lines = []
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        lines = [e for e in p.access_log_lines() if e.get("path") == "/bighead/100000"]
        if lines:
            break
        time.sleep(0.05)
    assert len(lines) == 1 and lines[0]["status"] == 502, lines
    assert p.get("/after", key=key).status == 200


def test_big_upstream_head_that_fits_passes(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    r = p.get("/bighead/20000", key=key)
    assert r.status == 200, r
    assert len(r.header("X-Pad-0") or "") == 4000, r.headers[:3]


def exchange_on(s, head):
    """Sends one request head on s and reads its whole answer (Content-Length framed)."""
    s.sendall(head)
    return read_answer(s, timeout=10)


def request_head(target, key, fields=()):
    lines = [b"GET " + target.encode() + b" HTTP/1.1", b"Host: t", b"Authorization: Bearer " + key.encode()]
    lines += [("%s: %s" % f).encode() for f in fields]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def assert_whole_head_passed(raw, total, line):
    """raw is a 200 carrying every X-H-<i> field of the upstream's exact_head(total, line)."""
    r = parse_raw_response(raw)
    assert r.status == 200, raw[:300]
    got = {k: v for k, v in r.headers if k.startswith("X-H-")}
    want = {}
    for ln in exact_head(total, line).split(b"\r\n")[2:-2]:
        k, _, v = ln.decode().partition(": ")
        want[k] = v
    assert len(want) >= total // line - 1 and got == want, \
        "%d of the upstream's %d X-H fields arrived intact" % (sum(got.get(k) == v for k, v in want.items()), len(want))
    assert r.body == b"ok", r.body[:100]


def padding_fields(total_bytes, field_bytes):
    """Request fields X-Pad-<i> of field_bytes each (CRLF included), total_bytes in all."""
    out = []
    for i in range(total_bytes // field_bytes):
        name = "X-Pad-%d" % i
        out.append((name, "q" * (field_bytes - len(name) - 4)))
    return out


def closes_after(raw):
    """True when a response head says Connection: close (a head too big for the
    connection's buffer is written by the proxy itself, which then closes)."""
    head = raw.partition(b"\r\n\r\n")[0].decode("latin-1").lower()
    return "\r\nconnection: close" in head


def test_upstream_head_of_60k_in_600_fields_reaches_the_client(catalog, proxies):
    """SPEC: only a head over 64 KiB is refused; one of 60 KB in 600 fields of 100 bytes
    reaches the client whole (with Connection: close), and the next connection is served."""
    key = wide(catalog)
    p = proxies.start(catalog)
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        raw = exchange_on(s, request_head("/headsize/60000/100", key))
    assert_whole_head_passed(raw, 60000, 100)
    assert closes_after(raw)
    r = parse_raw_response(raw_exchange(p.port, request_head("/after", key)))
    assert r.status == 200, r


def test_upstream_head_of_exactly_64k_passes_and_one_byte_more_is_502(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        assert_whole_head_passed(exchange_on(s, request_head("/headsize/65536/100", key)), 65536, 100)
    r = parse_raw_response(raw_exchange(p.port, request_head("/headsize/65537/100", key)))
    assert_json_error(r, 502, {"error_code": "bad_upstream_response"})


def test_upstream_head_of_60k_passes_after_an_8k_request_head(catalog, proxies):
    """The request head and the answer's head share the client connection's buffer: an 8 KB
    request head (80 fields) still leaves room for a 60 KB answer head."""
    key = wide(catalog)
    p = proxies.start(catalog)
    for line in (4000, 100):   # 15 long fields, then 600 short ones
        head = request_head("/headsize/60000/%d" % line, key, padding_fields(8000, 100))
        assert len(head) > 8000
        with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
            assert_whole_head_passed(exchange_on(s, head), 60000, line)


def test_upstream_head_of_64k_passes_after_the_largest_request_head(catalog, proxies):
    """A request head just under the proxy's 16 KiB limit (40 fields) and an answer head of
    exactly 64 KiB: 200, as a connection's first request and as a kept-alive one's second."""
    key = wide(catalog)
    p = proxies.start(catalog)
    head = request_head("/headsize/65536/100", key, padding_fields(16000, 400))
    assert 16000 < len(head) <= 16 * 1024
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        assert_whole_head_passed(exchange_on(s, head), 65536, 100)
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        assert parse_raw_response(exchange_on(s, request_head("/first", key))).status == 200
        assert_whole_head_passed(exchange_on(s, head), 65536, 100)


@pytest.mark.parametrize("cookie_bytes", [8000, 14000])
def test_a_head_near_16_kib_with_a_big_cookie_passes(catalog, proxies, cookie_bytes):
    """libmicrohttpd copies a Cookie value into the connection's pool beside the head, so
    the pool holds a near-16 KiB head twice over when most of it is a cookie: forwarded, as
    a connection's first request and as a kept-alive one's second (a 21 KiB pool answered
    both with libmicrohttpd's HTML 431)."""
    key = wide(catalog)
    p = proxies.start(catalog)
    head = request_head("/cookie", key, [("Cookie", "s=" + "c" * cookie_bytes)]
                        + padding_fields(15500 - cookie_bytes, 100))
    assert 15000 < len(head) <= 16 * 1024
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        assert parse_raw_response(exchange_on(s, head)).status == 200
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        assert parse_raw_response(exchange_on(s, request_head("/first", key))).status == 200
        assert parse_raw_response(exchange_on(s, head)).status == 200


def test_idle_kept_alive_connections_hold_no_buffer_memory(catalog, proxies):
    """Room for a 64 KiB upstream head in every connection's buffer costs no memory while
    the connection sits idle: 500 kept-alive connections, each past one request, add well
    under 8 KiB of resident memory each once idle (586b485's 32 KiB buffers: 32 KiB each)."""
    if SANITIZED:
        pytest.skip("AddressSanitizer's quarantine keeps every request's freed memory resident")
    if VALGRIND:
        pytest.skip("under valgrind the resident memory is valgrind's, not the proxy's")
    key = wide(catalog)
    p = proxies.start(catalog, proxy={"workers": 1})
    req = request_head("/x", key)
    warm = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    assert parse_raw_response(exchange_on(warm, req)).status == 200
    time.sleep(0.5)
    before = vm_rss_kib(p.proc.pid)
    socks = []
    try:
        for _ in range(500):
            s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
            socks.append(s)
            assert parse_raw_response(exchange_on(s, req)).status == 200
        per_conn = None
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            time.sleep(0.5)
            per_conn = (vm_rss_kib(p.proc.pid) - before) / len(socks)
            if per_conn < 8:
                break
        assert per_conn < 8, "%.1f KiB resident per idle kept-alive connection" % per_conn
        assert parse_raw_response(exchange_on(socks[0], req)).status == 200
    finally:
        for s in socks:
            s.close()
        warm.close()


def test_empty_lines_before_the_first_head_are_ignored(catalog, proxies):
    """RFC 9112 2.2: empty lines before a request line are ignored (the intake drops them);
    the connection then serves another request, after them too, and a big answer head."""
    key = wide(catalog)
    p = proxies.start(catalog)
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        r = parse_raw_response(exchange_on(s, b"\r\n" * 3000 + request_head("/first", key)))
        assert r.status == 200 and json.loads(r.body)["path"] == "/first", r
        r = parse_raw_response(exchange_on(s, b"\r\n\n" + request_head("/again", key)))
        assert r.status == 200 and json.loads(r.body)["path"] == "/again", r
        assert_whole_head_passed(exchange_on(s, request_head("/headsize/60000/100", key)), 60000, 100)


def wait_for(probe, timeout=5.0):
    """probe()'s first truthy value within timeout; its last value when none came."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(0.05)


def read_to_close(s, timeout=10):
    """Everything until the server closes (a big-head answer always ends with the close)."""
    s.settimeout(timeout)
    out = b""
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            return out
        out += chunk


def test_big_head_answer_streams_its_body_whole(catalog, proxies):
    """An answer whose head is too big for the connection's buffer is written by the proxy
    itself: its 50 KB head, its RateLimit headers and a 3 MB body that arrives in pieces,
    Content-Length framed; the access log says 200 and counts the body."""
    key = wide(catalog)
    p = proxies.start(catalog, limits={"headers": "draft"})
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(request_head("/widehead/3000000", key))
        raw = read_to_close(s)
    r = parse_raw_response(raw)
    assert r.status == 200 and closes_after(raw), raw[:200]
    names = {k.lower(): v for k, v in r.headers}
    assert names.get("content-length") == "3000000" and names.get("x-h-499") == "v" * 90, r.headers[:5]
    assert names.get("ratelimit-limit") == "1000000", sorted(names)[:10]
    assert r.body == b"b" * 3000000, len(r.body)
    line = wait_for(lambda: [e for e in p.access_log_lines() if e.get("path") == "/widehead/3000000"])
    assert line[0]["status"] == 200 and line[0]["bytes_sent"] == 3000000, line


def test_big_head_answer_without_a_length_ends_with_the_close(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(request_head("/widehead/500000/close", key))
        raw = read_to_close(s)
    r = parse_raw_response(raw)
    assert r.status == 200 and closes_after(raw)
    assert not any(k.lower() == "content-length" for k, _ in r.headers)
    assert r.body == b"b" * 500000, len(r.body)


def test_big_head_answer_to_head_has_no_body(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(request_head("/widehead/100000", key).replace(b"GET ", b"HEAD ", 1))
        raw = read_to_close(s)
    r = parse_raw_response(raw)
    assert r.status == 200 and r.body == b"", raw[-100:]
    assert ("Content-Length", "100000") in r.headers


def test_big_head_answer_gives_the_slot_back_before_it_ends(catalog, proxies):
    """A concurrency-1 user's next request, sent the moment a big-head answer has ended,
    meets no slot of its own (the end waits for the release, as through libmicrohttpd)."""
    catalog.plan("single", "--rate", "1000000/min", "--concurrency", "1")
    key = catalog.user_key("single")[1]
    p = proxies.start(catalog)
    for i in range(10):
        with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
            s.sendall(request_head("/widehead/100000", key))
            r = parse_raw_response(read_to_close(s))
        assert r.status == 200 and len(r.body) == 100000, (i, r.status)
        after = parse_raw_response(raw_exchange(p.port, request_head("/next", key)))
        assert after.status == 200, (i, after.status, after.body)


def test_client_leaving_a_big_head_answer_gives_the_slot_back(catalog, proxies):
    catalog.plan("single", "--rate", "1000000/min", "--concurrency", "1")
    key = catalog.user_key("single")[1]
    p = proxies.start(catalog)
    s = socket.create_connection(("127.0.0.1", p.port), timeout=10)
    s.sendall(request_head("/widehead/20000000", key))
    assert s.recv(4096).startswith(b"HTTP/1.1 200")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()   # a reset in the middle of the body
    assert wait_for(lambda: parse_raw_response(raw_exchange(p.port, request_head("/next", key))).status == 200)


def test_malformed_upstream_head_is_502(catalog, proxies):
    key = wide(catalog)
    p = proxies.start(catalog)
    for kind in ("nocolon", "ctl", "name"):
        r = p.get("/badhead/" + kind, key=key)
        assert_json_error(r, 502, {"error_code": "bad_upstream_response"})


def test_slot_taken_at_head_time_is_given_back_when_the_upload_dies(catalog, proxies):
    catalog.plan("one", "--rate", "100000/min", "--concurrency", "1")
    key = catalog.user_key("one")[1]
    p = proxies.start(catalog)
    s = open_head(p, post_head(b"/upload", 1000000, key=key, expect=True))
    s.settimeout(ANSWER_WITHIN_S)
    assert s.recv(4096).startswith(b"HTTP/1.1 100"), "admitted upload got no 100 Continue"
    s.sendall(b"x" * 20000)
    # admitted at head time: the slot is held while the body arrives
    assert_json_error(p.get("/second", key=key), 429)
    s.close()   # the rest of the body never comes
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and p.get("/third", key=key).status != 200:
        time.sleep(0.1)
    assert p.get("/fourth", key=key).status == 200, "the slot stayed taken after the upload died"


def test_refused_get_keeps_the_connection(catalog, proxies):
    """A refusal of a request that announced no body leaves the connection open (SPEC
    "Clients as they are"; test_keepalive_refusals.py has the rest)."""
    key = wide(catalog)
    p = proxies.start(catalog)
    s = open_head(p, b"GET /nokey HTTP/1.1\r\nHost: t\r\n\r\n")
    try:
        r = parse_raw_response(read_answer(s, ANSWER_WITHIN_S))
        assert json.loads(r.body)["error_code"] == "missing_api_key" and r.status == 401, r
        assert (r.header("Connection") or "").lower() != "close", r
        s.sendall(post_head(b"/next", key=key, method=b"GET"))
        r = parse_raw_response(read_answer(s, ANSWER_WITHIN_S))
        assert r.status == 200 and r.echo["path"] == "/next", r
    finally:
        s.close()
