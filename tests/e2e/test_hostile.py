"""Hostile input (the Operations issue), beyond what test_forwarding.py,
test_upstream_errors.py, test_anonymous.py, test_websocket.py and test_tierctl.py already
hold: oversized and self-contradicting request heads and bodies, bad and huge keys, CR, LF
and NUL in header values, spoofed X-Tier-* / X-Forwarded-* from untrusted peers, odd
percent-encoding (forwarded unchanged, and no way around exempt_paths or route limits),
malformed WebSocket frames, and tierctl fed bad numbers or a malformed import file (the
catalog unchanged; a proxy reading it keeps serving through a kill -9 mid-import).
After every hostile request the proxy must still answer a good one."""
import json
import re
import signal
import socket
import subprocess
import time

import pytest

from conftest import (TIERCTL_BIN, BAD_STDERR, _clean_env, assert_json_error,
                      echo_header, parse_raw_response, raw_exchange, wait_until)
from fault_helpers import metric
from fleet_helpers import (OP_CLOSE, http_read, OP_CONT, OP_PING, OP_TEXT, WS, parse_close, ws_connect,
                           ws_try, ws_upstream)  # noqa: F401


def wide(catalog, name="wide", *flags):
    catalog.plan(name, "--rate", "1000000/min", *flags)
    return catalog.user_key(name)


def raw(p, data, timeout=5):
    """Sends raw bytes on a fresh connection; the parsed answer (None if nothing came)."""
    out = raw_exchange(p.port, data, timeout=timeout)
    return parse_raw_response(out) if out else None


def head(target, key=None, extra=b"", method=b"GET"):
    h = method + b" " + target + b" HTTP/1.1\r\nHost: t\r\n"
    if key:
        h += b"Authorization: Bearer " + key.encode() + b"\r\n"
    return h + extra


def split_answers(out):
    """The Content-Length-framed answers in a byte string, parsed."""
    answers = []
    while out.startswith(b"HTTP/1."):
        h, sep, rest = out.partition(b"\r\n\r\n")
        m = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", h)
        n = int(m.group(1)) if m else len(rest)
        answers.append(parse_raw_response(h + sep + rest[:n]))
        out = rest[n:]
    return answers


def still_fine(p, key):
    r = p.get("/still-fine", key=key)
    assert r.status == 200 and r.echo["path"] == "/still-fine", r
    assert p.proc.poll() is None


def no_tier_spoof(e):
    """The upstream's view of a request shows no client-made X-Tier-* value."""
    for k, v in e["headers"]:
        if k.lower().startswith("x-tier"):
            assert k.lower() in ("x-tier-user", "x-tier-plan"), e["headers"]
            assert "admin" not in v and "pro" != v.strip(), e["headers"]


# --------------------------------------------------------------------------------------
# oversized and self-contradicting heads and bodies

def test_oversized_heads_other_shapes(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    cases = {
        "100 KB request target": head(b"/" + b"a" * 100000, key) + b"\r\n",
        "3000 small headers": head(b"/many", key) + b"X: 1\r\n" * 3000 + b"\r\n",
        "20 KB header name": head(b"/name", key) + b"X" * 20000 + b": 1\r\n\r\n",
        "head never ends, 1 MB": head(b"/endless", key) + b"X-A: " + b"b" * 1000000,
    }
    for what, data in cases.items():
        r = raw(p, data)
        assert r is not None, "%s: no answer" % what
        # SPEC: 400 or 431; 414 (what nginx answers for a long target) is let pass
        assert r.status in (400, 414, 431), (what, r)
        assert_json_error(r, r.status)
        still_fine(p, key)
    # an oversized head after a good request on the same keep-alive connection
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(head(b"/first", key) + b"\r\n")
        first = http_read(s)
        assert first.status == 200 and first.echo["path"] == "/first", first
        s.sendall(head(b"/second", key) + b"X-Big: " + b"a" * 20000 + b"\r\n\r\n")
        second = http_read(s)
        assert_json_error(second, 431)


# A malformed chunk is found by libmicrohttpd 0.9.75 while it reads the body, and it
# answers that itself, with an HTML body (a known limit): json_body False.
@pytest.mark.parametrize("what,extra,body,json_body", [
    ("Content-Length overflows 64 bits", b"Content-Length: 99999999999999999999999\r\n", b"x", True),
    ("negative Content-Length", b"Content-Length: -1\r\n", b"x", True),
    ("Content-Length not a number", b"Content-Length: 12abc\r\n", b"x", True),
    ("two different Content-Lengths", b"Content-Length: 3\r\nContent-Length: 5\r\n", b"abcde", True),
    ("bad chunk size", b"Transfer-Encoding: chunked\r\n", b"zz\r\nabc\r\n0\r\n\r\n", False),
    ("chunk size overflows", b"Transfer-Encoding: chunked\r\n",
     b"fffffffffffffffffffff\r\nabc\r\n0\r\n\r\n", False),
    # chunked is not the last coding: RFC 9112 6.3's 400, a problem body (test_conformance.py)
    ("unknown transfer coding", b"Transfer-Encoding: gzip, identity\r\n", b"abc", "problem"),
])
def test_malformed_body_framing_is_400_or_413(catalog, proxies, what, extra, body, json_body):
    _, key = wide(catalog)
    p = proxies.start(catalog, proxy={"max_body_bytes": 1000})
    t0 = time.monotonic()
    r = raw(p, head(b"/framing", key, extra, method=b"POST") + b"\r\n" + body, timeout=1.5)
    took = time.monotonic() - t0
    assert r is not None, "%s: no answer" % what
    assert r.status in (400, 413, 501), (what, r)
    if json_body == "problem":
        assert (r.header("Content-Type") or "").startswith("application/problem+json"), (what, r)
    elif json_body:
        assert_json_error(r, r.status)
    assert took < 1.5, "%s: answered after %.1f s" % (what, took)
    still_fine(p, key)


def test_content_length_and_chunked_together_cannot_smuggle(catalog, proxies, upstream_factory):
    """CL.TE: the bytes after the chunked body's end must not become a request of their
    own, nor reach the upstream as one."""
    up = upstream_factory()
    _, key = wide(catalog)
    p = proxies.start(catalog, upstream=up)
    body = b"0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n"
    data = (head(b"/carrier", key, b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n"
                 % len(body), method=b"POST") + b"\r\n" + body)
    with socket.create_connection(("127.0.0.1", p.port), timeout=1) as s:
        s.sendall(data)
        out = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                out += chunk
        except (socket.timeout, ConnectionError):
            pass
    answers = split_answers(out)
    assert answers, "no answer"
    first = answers[0]
    if first.status == 200:
        # chunked won: an empty body went upstream, and then the connection is closed
        # (RFC 9112 6.1: "the server MUST close the connection after responding"), so
        # the bytes after the chunked body are never read as a request of their own
        assert first.echo["length"] == 0 and first.echo["path"] == "/carrier", first.echo
        assert len(answers) == 1, "the smuggled bytes were answered as a request: %r" % (
            [(a.status, a.body[:60]) for a in answers[1:]],)
    else:
        assert first.status == 400, out[:300]
    assert up.stats()["requests"] <= 1, up.stats()
    still_fine(p, key)


def test_huge_announced_body_refused_before_it_is_sent(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog, proxy={"max_body_bytes": 1000000})
    for expect in (b"", b"Expect: 100-continue\r\n"):
        with socket.create_connection(("127.0.0.1", p.port), timeout=3) as s:
            s.sendall(head(b"/upload", key, b"Content-Length: 100000000000\r\n" + expect,
                           method=b"POST") + b"\r\n")
            out = s.recv(65536)
        assert not out.startswith(b"HTTP/1.1 100"), out[:100]
        r = parse_raw_response(out)
        assert_json_error(r, 413)
    still_fine(p, key)


# --------------------------------------------------------------------------------------
# bad and huge keys

def test_bad_and_huge_keys_are_401(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    bad = [
        ("Bearer " + "k" * 12000, "invalid_api_key"),
        ("Bearer " + key + "x", "invalid_api_key"),
        ("Bearer " + key[:-1], "invalid_api_key"),
        ("Bearer " + key.upper(), "invalid_api_key"),
        ("Bearer " + key[:10] + " " + key[10:], "invalid_api_key"),
        ("Bearer ' OR 1=1 --", "invalid_api_key"),
        ("Bearer %00" + key, "invalid_api_key"),
        ("Bearer \xff\xfe" + key, "invalid_api_key"),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer", None),
        ("Bearer    ", None),
        ("", None),
        (key, None),            # no scheme
    ]
    c = p.client()
    for value, code in bad:
        r = c.request("GET", "/k", headers=[("Authorization", value)])
        body = assert_json_error(r, 401)
        if code:
            assert body["error_code"] == code, (value[:40], body)
        else:
            assert body["error_code"] in ("missing_api_key", "invalid_api_key"), (value, body)
        assert r.header("WWW-Authenticate", "").startswith("Bearer"), (value[:40], r)
    # many different bad keys in a row: all 401, the proxy unaffected
    for i in range(300):
        r = c.request("GET", "/k", headers=[("Authorization", "Bearer bad%06d" % i)])
        assert r.status == 401, r
    c.close()
    still_fine(p, key)


def test_bearer_scheme_is_case_insensitive(catalog, proxies):
    # RFC 9110 11.1: the authentication scheme is case-insensitive
    _, key = wide(catalog)
    p = proxies.start(catalog)
    for scheme in ("bearer", "BEARER"):
        r = p.get("/k", headers=[("Authorization", "%s %s" % (scheme, key))])
        assert r.status == 200, (scheme, r)


# --------------------------------------------------------------------------------------
# CR, LF, NUL in header lines

def test_nul_in_header_values_is_refused(catalog, proxies, upstream_factory):
    # RFC 9110 5.5: a field value with NUL is rejected, or NUL replaced by SP; never cut
    up = upstream_factory()
    _, key = wide(catalog)
    p = proxies.start(catalog, upstream=up)
    r = raw(p, head(b"/nul") + b"Authorization: Bearer " + key.encode() + b"\x00junk\r\n\r\n")
    assert r is not None, "no answer"
    assert_json_error(r, 400, {"error_code": "malformed_request"})
    r = raw(p, head(b"/nul", key) + b"X-A: before\x00after\r\n\r\n")
    assert r is not None, "no answer"
    assert_json_error(r, 400, {"error_code": "malformed_request"})
    still_fine(p, key)


def test_nul_in_a_later_head_on_a_kept_alive_connection(catalog, proxies, upstream_factory):
    # screened where libmicrohttpd has it before it parses the field lines (later_head.h):
    # the first head's answer, and nothing of the head reaches the upstream
    up = upstream_factory()
    _, key = wide(catalog)
    p = proxies.start(catalog, upstream=up)
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(head(b"/first", key) + b"\r\n")
        assert http_read(s).status == 200
        s.sendall(head(b"/nul", key) + b"X-A: before\x00after\r\n\r\n")
        r = http_read(s)
    assert_json_error(r, 400, {"error_code": "malformed_request"})
    assert up.stats()["requests"] == 1, up.stats()


# --------------------------------------------------------------------------------------
# the first head of a connection: every refusal is a JSON error, at once

@pytest.mark.parametrize("what,data,status", [
    ("not HTTP", b"THIS IS NOT HTTP\r\n\r\n", 400),
    ("a TLS ClientHello", b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + b"\x00" * 32, 400),
    ("space before the method", b" GET / HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("no version", b"GET /\r\n\r\n", 400),
    ("not an HTTP version", b"GET / FOO/1.1\r\nHost: t\r\n\r\n", 400),
    ("HTTP/2.0 in an HTTP/1 line", b"GET / HTTP/2.0\r\nHost: t\r\n\r\n", 505),
    ("HTTP/0.9", b"GET / HTTP/0.9\r\nHost: t\r\n\r\n", 505),
    ("a field line without colon", b"GET / HTTP/1.1\r\nHost: t\r\nNoColonHere\r\n\r\n", 400),
    ("NUL in the target", b"GET /a\x00b HTTP/1.1\r\nHost: t\r\n\r\n", 400),
    ("Content-Length not a number", b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: abc\r\n\r\n", 400),
    ("Content-Length over 64 bits",
     b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413),
    ("a 40 KB field", b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n", 431),
    ("a 40 KB target", b"GET /" + b"a" * 40000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414),
])
def test_bad_first_heads_get_one_json_error_and_a_close(catalog, proxies, what, data, status):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    t0 = time.monotonic()
    out = raw_exchange(p.port, data, timeout=3)
    took = time.monotonic() - t0
    assert out, "%s: no answer" % what
    r = parse_raw_response(out)
    assert_json_error(r, status)
    assert r.header("Connection") == "close", r
    assert out.count(b"HTTP/1.") == 1, "%s: more than one status line: %r" % (what, out[:400])
    # the proxy closed the connection: raw_exchange returned on EOF, not on its timeout
    assert took < 2.5, "%s: answered after %.1f s" % (what, took)
    still_fine(p, key)


def test_refusals_of_first_heads_are_counted_and_logged(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    raw(p, b"GET /bad HTTP/1.1\r\nX-A: a\x00b\r\n\r\n")
    raw(p, b"GARBAGE\r\n\r\n")
    still_fine(p, key)
    assert wait_until(lambda: len(p.access_log_lines()) >= 3, 5)
    bad = [e for e in p.access_log_lines() if e["status"] == 400]
    assert [(e["method"], e["path"]) for e in bad] == [("GET", "/bad"), (None, None)], bad
    assert all(e["decision"] == "malformed" and e["user"] is None for e in bad), bad
    assert metric(p, "tierproxy_requests_total", code="400") == 2


def test_first_head_in_pieces_or_late_is_served(catalog, proxies):
    """The head arrives a while after the connect, then in pieces with pauses: served."""
    _, key = wide(catalog)
    p = proxies.start(catalog)
    data = head(b"/pieces", key) + b"X-A: 1\r\n\r\n"
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        time.sleep(0.3)
        for i in range(0, len(data), 7):
            s.sendall(data[i:i + 7])
            time.sleep(0.01)
        r = http_read(s)
        assert r.status == 200 and r.echo["path"] == "/pieces", r
        # and the connection is kept alive for a second request
        s.sendall(head(b"/again", key) + b"\r\n")
        r = http_read(s)
        assert r.status == 200 and r.echo["path"] == "/again", r


def test_pipelined_requests_in_the_first_packet(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    data = b"".join(head(b"/p%d" % i, key) + b"\r\n" for i in range(3))
    with socket.create_connection(("127.0.0.1", p.port), timeout=5) as s:
        s.sendall(data)
        # buffered: two answers may arrive in one segment (http_read drops what follows
        # the answer it reads)
        f = s.makefile("rb")
        paths = []
        for _ in range(3):
            h = b""
            while not h.endswith(b"\r\n\r\n"):
                line = f.readline()
                assert line, h
                h += line
            n = int(re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", h).group(1))
            paths.append(parse_raw_response(h + f.read(n)).echo["path"])
    assert paths == ["/p0", "/p1", "/p2"]


def test_connections_that_send_nothing_or_half_a_head_are_let_go(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)

    def gauge():
        return metric(p, "tierproxy_connections")
    still_fine(p, key)
    time.sleep(0.2)     # the connections made while starting it are gone
    base = gauge()
    socks = [socket.create_connection(("127.0.0.1", p.port)) for _ in range(5)]
    socks[1].sendall(b"GET /half HTTP/1.1\r\nHost:")
    socks[2].sendall(b"GET /half HTTP/1.1\r\nHost:")
    socks[2].shutdown(socket.SHUT_WR)       # half a head, then FIN: it will never end
    assert wait_until(lambda: gauge() == base + 4, 5), (base, gauge())
    for s in socks:
        s.close()
    assert wait_until(lambda: gauge() == base, 5), (base, gauge())
    still_fine(p, key)


@pytest.mark.parametrize("what,lines,refused", [
    ("bare CR inside a value", b"X-A: a\rX-Tier-User: admin\r\n", True),
    ("bare LF ending a line", b"X-A: a\nX-Tier-User: admin\r\n", False),
    ("obs-fold continuation", b"X-A: a\r\n X-Tier-User: admin\r\n", True),
    ("space before the colon", b"X-Tier-User : admin\r\n", True),
    ("tab before the colon", b"X-Tier-Plan\t: pro\r\n", True),
    ("header name with a space", b"X Tier User: admin\r\n", True),
])
def test_crlf_tricks_in_header_lines(catalog, proxies, what, lines, refused):
    """A header line that breaks RFC 9112 is refused with a JSON 400, as the RFC asks; a
    bare LF ends a line (RFC 9112 2.2 lets a recipient take it). Either way the upstream
    never sees an X-Tier-* header the client wrote."""
    user, key = wide(catalog)
    p = proxies.start(catalog)
    r = raw(p, head(b"/crlf", key, lines) + b"\r\n")
    assert r is not None, "%s: no answer" % what
    if r.status == 200:
        e = r.echo
        assert echo_header(e, "X-Tier-User") == [user], (what, e["headers"])
        assert echo_header(e, "X-Tier-Plan") == ["wide"], (what, e["headers"])
        no_tier_spoof(e)
        # and no header the client did not write correctly, under a mangled name
        names = {k.lower() for k, _ in e["headers"]}
        assert names <= {"host", "x-a", "x-forwarded-for", "x-forwarded-proto",
                         "x-forwarded-host", "x-tier-user", "x-tier-plan",
                         "content-length"}, (what, e["headers"])
        if "x-a" in names:     # obs-fold replaced by SP (RFC 9112 5.2), never cut or joined
            assert echo_header(e, "X-A")[0] in ("a", "a X-Tier-User: admin"), (what, e["headers"])
    else:
        assert_json_error(r, 400, {"error_code": "malformed_request"})
    assert (r.status == 400) == refused, (what, r)
    still_fine(p, key)


def test_encoded_crlf_in_target_is_forwarded_not_decoded(catalog, proxies):
    user, key = wide(catalog)
    p = proxies.start(catalog)
    # SPEC "One request model": %00 in the path is 400, dot segments (%2e too) are removed
    # and the upstream receives the path so normalised; the query is untouched
    normalised = {"/%2e%2e/%2e%2e/etc/passwd": "/etc/passwd"}
    for target in ("/a%0d%0aX-Tier-User:%20admin", "/b?q=%0D%0AX-Tier-Plan:%20pro%0d%0a%0d%0a",
                   "/cd?e=%00", "/%2e%2e/%2e%2e/etc/passwd", "/%C0%AF%c0%ae", "/%u002e/x",
                   "/trailing%", "/a%2", "/%FF%FE?%00"):
        r = p.get(target, key=key)
        assert r.status == 200, (target, r)
        assert r.echo["path"] == normalised.get(target, target), (target, r.echo["path"])
        assert echo_header(r.echo, "X-Tier-User") == [user], r.echo["headers"]
        assert echo_header(r.echo, "X-Tier-Plan") == ["wide"], r.echo["headers"]


# --------------------------------------------------------------------------------------
# spoofed X-Tier-* and X-Forwarded-* from untrusted peers

def test_tier_spoofs_removed_in_every_form(catalog, proxies, ws_upstream):
    user, key = wide(catalog)
    catalog.plan("anon", "--rate", "100/min")
    p = proxies.start(catalog, auth={"anonymous_plan": "anon"},
                      proxy={"exempt_paths": "/public"})
    spoof = [("x-TIER-user", "admin"), ("X-Tier-User", "admin2"), ("X-TIER-PLAN", "pro"),
             ("X-Tier-", "admin"), ("X-Tier-User-Id", "admin"), ("X-Tier-Plan", "")]
    # keyed, anonymous, exempt: the client's X-Tier-* never reach the upstream
    for kw, want_user in (({"key": key}, [user]), ({}, None), ({}, "exempt")):
        target = "/public/x" if want_user == "exempt" else "/x"
        r = p.get(target, headers=spoof, **kw)
        assert r.status == 200, r
        names = [k.lower() for k, _ in r.echo["headers"]]
        if want_user == "exempt":
            assert not any(n.startswith("x-tier") for n in names), r.echo["headers"]
        else:
            assert names.count("x-tier-user") <= 1 and names.count("x-tier-plan") == 1, \
                r.echo["headers"]
            if want_user:
                assert echo_header(r.echo, "X-Tier-User") == want_user, r.echo["headers"]
            assert not any(n.startswith("x-tier") and n not in ("x-tier-user", "x-tier-plan")
                           for n in names), r.echo["headers"]
            no_tier_spoof(r.echo)
    # and on a WebSocket handshake
    pw = proxies.start(catalog, upstream=ws_upstream)
    w = ws_connect(pw.port, "/ws", key=key, headers=spoof)
    try:
        hs = ws_upstream.stats()["ws_handshakes"][-1]
        names = [k.lower() for k, _ in hs]
        assert [v for k, v in hs if k.lower() == "x-tier-user"] == [user], hs
        assert not any(n.startswith("x-tier") and n not in ("x-tier-user", "x-tier-plan")
                       for n in names), hs
    finally:
        w.close()


def test_forwarded_proto_and_host_spoofs_from_untrusted_peer(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog, proxy={"trusted_proxies": "127.0.0.3/32"})
    e = p.get("/f", key=key, source="127.0.0.1",
              headers=[("Host", "api.example.test"), ("X-Forwarded-Proto", "https"),
                       ("X-Forwarded-Host", "evil.example"),
                       ("X-Forwarded-For", "10.0.0.1, 10.0.0.2")]).echo
    assert echo_header(e, "X-Forwarded-Proto") == ["http"], e["headers"]
    assert echo_header(e, "X-Forwarded-Host") == ["api.example.test"], e["headers"]
    xff = echo_header(e, "X-Forwarded-For")
    assert len(xff) == 1 and xff[0].split(",")[-1].strip() == "127.0.0.1", e["headers"]
    # a trusted peer's X-Forwarded-Proto/Host are kept
    e = p.get("/f", key=key, source="127.0.0.3",
              headers=[("Host", "lb.internal"), ("X-Forwarded-Proto", "https"),
                       ("X-Forwarded-Host", "api.example.test")]).echo
    assert echo_header(e, "X-Forwarded-Proto") == ["https"], e["headers"]
    assert echo_header(e, "X-Forwarded-Host") == ["api.example.test"], e["headers"]


def test_garbage_x_forwarded_for(catalog, proxies):
    catalog.plan("anon", "--rate", "2/30s")
    p = proxies.start(catalog, auth={"anonymous_plan": "anon"},
                      proxy={"trusted_proxies": "127.0.0.3/32"})
    # from an untrusted peer: any garbage, any size, is just text; limited per peer
    junk = ["", ",,,", "999.999.999.999", "::::", "[::1]:80", "a" * 5000,
            ", ".join("10.0.%d.%d" % (i // 250, i % 250) for i in range(600)), "\t1.2.3.4\t"]
    st = [p.get("/x", source="127.0.0.1", headers=[("X-Forwarded-For", j)]).status
          for j in junk]
    assert st[:2] == [200, 200] and set(st[2:]) == {429}, st
    # from a trusted peer: garbage on the left (what the client wrote) changes nothing;
    # the address the peer appended is the client
    st = [p.get("/x", source="127.0.0.3",
                headers=[("X-Forwarded-For", "%s, 203.0.113.9" % j)]).status
          for j in ("not-an-ip", "999.1.1.1", "1.2.3.4")]
    assert st == [200, 200, 429], st
    assert p.proc.poll() is None


# --------------------------------------------------------------------------------------
# odd percent-encoding and dot segments must not get around exempt_paths or route limits

@pytest.mark.parametrize("target", ["/public/../private", "/public/%2e%2e/private",
                                    "/public/./../private"])
def test_dot_segments_do_not_escape_exempt_paths(catalog, proxies, target):
    """An exempt prefix matched on the raw path lets an unauthenticated request reach
    /private at any upstream that resolves dot segments (RFC 3986 5.2.4), as nginx does
    before matching a location. Expected: not exempt (401)."""
    p = proxies.start(catalog, proxy={"exempt_paths": "/public"})
    r = p.get(target)
    assert r.status == 401, "%s forwarded without a key: %r" % (target, r)
    assert_json_error(r, 401, {"error_code": "missing_api_key"})


@pytest.mark.parametrize("target", ["/x/../upload", "//upload", "/./upload", "/%75pload"])
def test_dot_segments_and_slashes_do_not_escape_route_limits(catalog, proxies, target):
    """A route limit "POST /upload" holds for every spelling of /upload that an upstream
    (or nginx, matching a location) resolves to it."""
    catalog.plan("routed", "--rate", "1000/min")
    catalog.limit("routed", "--rate", "1/30s", "--route", "POST /upload")
    _, key = catalog.user_key("routed")
    p = proxies.start(catalog)
    assert p.request("POST", "/upload", key=key, body=b"1").status == 200
    r = p.request("POST", target, key=key, body=b"2")
    assert r.status == 429, "%s escaped the route limit: %r" % (target, r)


# --------------------------------------------------------------------------------------
# malformed WebSocket frames

def _frame(b0, payload=b"", length=None, mask=True):
    n = len(payload) if length is None else length
    key = b"\x01\x02\x03\x04"
    masked = bytes(c ^ key[i % 4] for i, c in enumerate(payload))
    if n < 126:
        h = bytes([b0, (0x80 if mask else 0) | n])
    elif n < 65536:
        h = bytes([b0, (0x80 if mask else 0) | 126]) + n.to_bytes(2, "big")
    else:
        h = bytes([b0, (0x80 if mask else 0) | 127]) + n.to_bytes(8, "big")
    return h + (key + masked if mask else payload)


MALFORMED_FRAMES = [
    ("RSV1 set", _frame(0x80 | 0x40 | OP_TEXT, b"hi")),
    ("reserved opcode 0x3", _frame(0x80 | 0x3, b"hi")),
    ("reserved control opcode 0xB", _frame(0x80 | 0xB, b"hi")),
    ("fragmented ping", _frame(OP_PING, b"hi")),
    ("ping over 125 bytes", _frame(0x80 | OP_PING, b"p" * 126)),
    ("continuation with nothing to continue", _frame(0x80 | OP_CONT, b"hi")),
    ("new text inside a fragmented message",
     _frame(OP_TEXT, b"part") + _frame(0x80 | OP_TEXT, b"new")),
    ("64-bit length with the top bit set", bytes([0x82, 0xFF]) + (1 << 63).to_bytes(8, "big")
     + b"\x01\x02\x03\x04"),
]


def test_malformed_websocket_frames_close_1002(catalog, proxies, ws_upstream):
    user, key = wide(catalog, "ws1", "--concurrency", "1")
    p = proxies.start(catalog, upstream=ws_upstream)
    for what, frame in MALFORMED_FRAMES:
        ws = ws_try(p.port, "/ws", key)        # concurrency 1: the last one's slot came back
        assert isinstance(ws, WS), (what, ws)
        try:
            ws.send_text("ok")
            assert ws.recv_message() == (OP_TEXT, b"ok"), what
            ws.sock.sendall(frame)
            ws.sock.settimeout(3)
            fin, op, payload = ws.recv_frame()
            assert op == OP_CLOSE and parse_close(payload)[0] == 1002, (what, op, payload)
            assert ws.wait_eof(3), "%s: connection left open after the close" % what
        finally:
            ws.close()
        assert wait_until(lambda: ws_upstream.stat("ws_open", user) == 0, 3), \
            "%s: upstream side left open" % what
    ws = ws_try(p.port, "/ws", key)
    assert isinstance(ws, WS), ws
    ws.send_text("after")
    assert ws.recv_message() == (OP_TEXT, b"after")
    ws.close()


def test_unmasked_client_frame_closes_1002(catalog, proxies, ws_upstream):
    # RFC 6455 5.1: a server MUST close the connection on an unmasked client frame (1002)
    _, key = wide(catalog)
    p = proxies.start(catalog, upstream=ws_upstream)
    ws = ws_try(p.port, "/ws", key)
    assert isinstance(ws, WS), ws
    try:
        ws.sock.sendall(_frame(0x80 | OP_TEXT, b"unmasked", mask=False))
        ws.sock.settimeout(3)
        fin, op, payload = ws.recv_frame()
        assert op == OP_CLOSE and parse_close(payload)[0] == 1002, \
            "unmasked frame answered with opcode %d %r" % (op, payload[:40])
    finally:
        ws.close()


# --------------------------------------------------------------------------------------
# tierctl: bad numbers and malformed import files leave the catalog unchanged

def tierctl(db, *args, timeout=30):
    return subprocess.run([TIERCTL_BIN, "--db", str(db)] + [str(a) for a in args],
                          capture_output=True, text=True, timeout=timeout, env=_clean_env(),
                          stdin=subprocess.DEVNULL)


def assert_refused(cp, what):
    assert cp.returncode in (1, 2), "%s: exit %d\n%s%s" % (what, cp.returncode, cp.stdout,
                                                            cp.stderr)
    assert cp.stderr.startswith("tierctl: "), (what, cp.stderr[:300])
    assert not BAD_STDERR.search(cp.stderr), (what, cp.stderr[-2000:])


BAD_ARGS = [
    ["plan", "add", "x", "--rate", "99999999999999999999/s"],
    ["plan", "add", "x", "--rate", "1/99999999999999999999s"],
    ["plan", "add", "x", "--rate", "9223372036854775807/day"],
    ["plan", "add", "x", "--rate", "1/0s"],
    ["plan", "add", "x", "--rate", "-5/s"],
    ["plan", "add", "x", "--rate", "0x10/s"],
    ["plan", "add", "x", "--rate", "1e3/s"],
    ["plan", "add", "x", "--rate", " 5/s"],
    ["plan", "add", "x", "--rate", "5/s "],
    ["plan", "add", "x", "--rate", "5/ s"],
    ["plan", "add", "x", "--concurrency", "99999999999999999999"],
    ["plan", "add", "x", "--concurrency", "-1"],
    ["plan", "add", "x", "--rate", "1/s", "--burst", "99999999999999999999"],
    ["plan", "add", "x", "--ws-messages", "1/0min"],
    ["plan", "add", "x" * 100000],
    ["plan", "add", "\x1b[31mred"],
    ["plan", "add", "caf\xe9"],
    ["plan", "add", ""],
    ["plan", "add", "-x"],
    ["user", "add", "u" * 100000, "--plan", "free"],
    ["user", "add", "", "--plan", "free"],
    ["user", "add", "a/b\\c", "--plan", "../free"],
    ["key", "revoke", "99999999999999999999"],
    ["key", "revoke", "-1"],
    ["key", "create", "nobody"],
    ["key", "create", "alice", "--label", "l" * 100000],
    ["limit", "remove", "free", "99999999999999999999"],
    ["limit", "add", "free", "--rate", "1/s", "--route", "GET /" + "r" * 100000],
    ["limit", "add", "free", "--rate", "1/s", "--route", "GET /a\tb"],
    ["limit", "add", "free", "--rate", "1/s", "--route", "G\x01T /a"],
]


def test_tierctl_bad_numbers_and_names_change_nothing(catalog):
    catalog.run("user", "add", "alice", "--plan", "free")
    before = catalog.run("export").stdout
    accepted = []
    for args in BAD_ARGS:
        cp = tierctl(catalog.path, *args)
        if cp.returncode == 0:
            accepted.append(args)
            continue
        assert_refused(cp, args[:4])
        assert catalog.run("export").stdout == before, "%r changed the catalog" % args[:4]
    assert not accepted, "accepted: %r" % [[a[:40] for a in x] for x in accepted]


def _nested(depth):
    return "[" * depth + "]" * depth


MALFORMED_IMPORTS = {
    "empty file": b"",
    "only whitespace": b" \n\t ",
    "deeply nested arrays": _nested(200000).encode(),
    "deeply nested objects": ('{"a":' * 100000 + "1" + "}" * 100000).encode(),
    "invalid UTF-8": b'{"format": "tierproxy-catalog\xff\xfe"}',
    "truncated": None,       # filled from the export
    "NUL in a plan name": None,
    "5 MB plan name": None,
    "number overflow": None,
    "duplicate top-level key": None,
}


def test_tierctl_malformed_imports_change_nothing(catalog, tmp_path):
    catalog.run("user", "add", "alice", "--plan", "free")
    catalog.key("alice")
    before = catalog.run("export").stdout
    files = dict(MALFORMED_IMPORTS)
    files["truncated"] = before[:len(before) // 2].encode()
    d = json.loads(before)
    d["plans"][0]["name"] = "fr\u0000ee"
    files["NUL in a plan name"] = json.dumps(d).encode()
    d = json.loads(before)
    d["plans"][0]["name"] = "p" * 5000000
    files["5 MB plan name"] = json.dumps(d).encode()
    files["number overflow"] = before.replace('"amount": 100,', '"amount": 1' + "0" * 40 + ",",
                                              1).encode()
    assert files["number overflow"] != before.encode()
    files["duplicate top-level key"] = (b'{"plans": [], ' + before.strip()[1:].encode())
    for what, data in files.items():
        f = tmp_path / "bad.json"
        f.write_bytes(data)
        cp = tierctl(catalog.path, "import", f)
        assert cp.returncode == 1, "%s: exit %d\n%s" % (what, cp.returncode, cp.stderr[-500:])
        assert_refused(cp, what)
        assert len(cp.stderr.splitlines()) == 1, (what, cp.stderr[:500])
        assert catalog.run("export").stdout == before, "%s changed the catalog" % what
    # a directory
    cp = tierctl(catalog.path, "import", tmp_path)
    assert_refused(cp, "a directory")
    assert catalog.run("export").stdout == before


def test_kill_9_mid_import_under_a_running_proxy(catalog, proxies, tmp_path):
    """The proxy reading the catalog keeps serving the old one through a killed import:
    no 401 for a key that exists before and after, no 503."""
    _, key = wide(catalog)
    p = proxies.start(catalog, plans={"refresh_ms": 50})
    before = catalog.run("export").stdout
    doc = json.loads(before)
    for i in range(60000):
        doc["users"].append({"id": "bulk%06d" % i, "plan": "pro",
                             "created": "2024-01-01T00:00:00Z"})
    big = tmp_path / "big.json"
    big.write_text(json.dumps(doc))
    c = p.client()
    statuses = []
    for delay in (0.05, 0.15, 0.3):
        proc = subprocess.Popen([TIERCTL_BIN, "--db", str(catalog.path), "import", str(big)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env=_clean_env())
        t_end = time.monotonic() + delay
        while time.monotonic() < t_end:
            statuses.append(c.get("/during-import", key=key).status)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        for _ in range(10):
            statuses.append(c.get("/after-kill", key=key).status)
            time.sleep(0.01)
        after = json.loads(catalog.run("export").stdout)
        assert len(after["users"]) in (len(json.loads(before)["users"]), len(doc["users"])), \
            "a partial import is visible"
    c.close()
    assert statuses and set(statuses) == {200}, \
        "answers while imports were killed: %r" % sorted(set(statuses))
    assert p.admin("/health").status == 200
