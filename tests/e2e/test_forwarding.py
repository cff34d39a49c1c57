"""What the upstream receives, and that its answer comes back unchanged. Cases are data:
what the client sends, what the upstream must see."""
import hashlib
import random

import pytest

from conftest import echo_header
from upstream import big_body

# Request targets that must reach the upstream byte for byte: no decoding, no
# re-encoding, the query untouched (an encoded slash in the path is 400, and dot segments
# and repeated slashes are removed: SPEC "One request model", test_request_target.py).
RAW_TARGETS = [
    "/a%2Cb?x=%20&y=%2F",
    "/caf%C3%A9/%7e%7E?a=1&a=2&b=",
    "/x;p=1/z?q=a+b%2B&&",
    "/dots/./a/../b//c?",         # forwarded normalised: SPEC "One request model"
    "/odd%zz%/?%%=%",
    "/emoji/%F0%9F%98%80?k=%E2%9C%93&list[]=1&list[]=2",
    "/q?" + "&".join("k%d=v%d" % (i, i) for i in range(300)),
]


# Dot segments and repeated slashes are removed, and the upstream receives the path so
# normalised (SPEC "One request model"); everything else, byte for byte.
NORMALISED = {"/dots/./a/../b//c?": "/dots/b/c?"}


@pytest.mark.parametrize("target", RAW_TARGETS)
def test_path_and_query_byte_exact(catalog, start_proxy, target):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get(target, key=key)
    assert r.status == 200, r
    assert r.echo["path"] == NORMALISED.get(target, target)


BIG = random.Random(1).randbytes(1 << 20)


@pytest.mark.parametrize("method,body,chunked", [
    ("POST", BIG, False),                        # 1 MiB of binary, every byte value
    ("POST", BIG[:300000], True),                # the client sends it chunked
    ("PUT", b"\x00\r\n\r\nPUT body\xff", False),
    ("PATCH", b'{"op":"replace","path":"/a","value":1}', False),
    ("DELETE", b"delete-with-a-body", False),
    ("POST", b"", False),
    ("OPTIONS", b"", False),
], ids=["POST-1MiB-binary", "POST-chunked", "PUT", "PATCH", "DELETE-with-body", "POST-empty",
        "OPTIONS"])
def test_method_and_body_byte_exact(catalog, start_proxy, method, body, chunked):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.request(method, "/body?m=" + method, key=key, body=body, chunked=chunked,
                  headers=[("Content-Type", "application/octet-stream")])
    assert r.status == 200, r
    e = r.echo
    assert e["method"] == method
    assert e["length"] == len(body)
    assert e["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert e["body"] == body


def test_get_without_body(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    e = p.get("/nobody", key=key).echo
    assert e["method"] == "GET" and e["length"] == 0


HOP_BY_HOP_REQUEST = [
    ("X-One", "1"),
    ("X-Dup", "a"),
    ("X-Dup", "b"),
    ("Accept", "application/json"),
    ("User-Agent", "e2e-client/1"),
    ("Connection", "keep-alive, X-Hop-Custom"),
    ("X-Hop-Custom", "secret"),
    ("Keep-Alive", "timeout=5"),
    ("TE", "trailers"),
    ("Proxy-Authorization", "Basic Zm9vOmJhcg=="),
]


def test_headers_forwarded_minus_hop_by_hop(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/hdr", key=key, headers=HOP_BY_HOP_REQUEST)
    assert r.status == 200, r
    e = r.echo
    assert echo_header(e, "X-One") == ["1"], e["headers"]
    assert echo_header(e, "X-Dup") in (["a", "b"], ["a, b"], ["a,b"]), e["headers"]
    assert echo_header(e, "Accept") == ["application/json"], e["headers"]
    assert echo_header(e, "User-Agent") == ["e2e-client/1"], e["headers"]
    for gone in ("X-Hop-Custom", "Keep-Alive", "TE", "Proxy-Authorization"):
        assert echo_header(e, gone) == [], "%s reached the upstream: %r" % (gone, e["headers"])
    for v in echo_header(e, "Connection"):
        assert "x-hop-custom" not in v.lower(), e["headers"]


def test_upgrade_header_not_forwarded(catalog, start_proxy):
    # Upgrade is hop-by-hop; a non-WebSocket Upgrade must not reach the upstream
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/up", key=key, headers=[("Upgrade", "h2c")])
    assert r.status == 200, r
    assert echo_header(r.echo, "Upgrade") == [], r.echo["headers"]


def test_key_is_stripped(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    e = p.get("/k", key=key).echo
    assert echo_header(e, "Authorization") == [], e["headers"]
    assert key not in str(e["headers"])


def test_forward_key_yes_keeps_it(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, auth={"forward_key": "yes"})
    e = p.get("/k", key=key).echo
    assert echo_header(e, "Authorization") == ["Bearer " + key], e["headers"]


def test_forward_key_yes_with_custom_header(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, auth={"key_header": "X-Api-Key", "forward_key": "yes"})
    e = p.get("/k", headers=[("X-Api-Key", key)]).echo
    assert echo_header(e, "X-Api-Key") == [key], e["headers"]


def test_x_forwarded_headers(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    e = p.get("/fwd", key=key, headers=[("Host", "api.example.test")]).echo
    assert echo_header(e, "X-Forwarded-For") == ["127.0.0.1"], e["headers"]
    assert echo_header(e, "X-Forwarded-Proto") == ["http"], e["headers"]
    assert echo_header(e, "X-Forwarded-Host") == ["api.example.test"], e["headers"]
    # a client's own X-Forwarded-For gets the client's address appended
    e = p.get("/fwd", key=key, headers=[("X-Forwarded-For", "192.0.2.9")]).echo
    xff = echo_header(e, "X-Forwarded-For")
    assert len(xff) == 1 and xff[0].split(",")[-1].strip() == "127.0.0.1", e["headers"]


def test_tier_headers_name_the_caller_and_spoofs_are_removed(catalog, start_proxy):
    catalog.plan("silver", "--rate", "100/min")
    user, key = catalog.user_key("silver")
    p = start_proxy(catalog)
    e = p.get("/who", key=key, headers=[("X-Tier-User", "admin"), ("X-Tier-Plan", "pro"),
                                        ("x-tier-debug", "1")]).echo
    assert echo_header(e, "X-Tier-User") == [user], e["headers"]
    assert echo_header(e, "X-Tier-Plan") == ["silver"], e["headers"]
    assert echo_header(e, "X-Tier-Debug") == [], e["headers"]


@pytest.mark.parametrize("status", [200, 201, 202, 301, 400, 404, 409, 500, 503])
def test_response_status_and_body_unchanged(catalog, start_proxy, status):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/status/%d" % status, key=key)
    assert r.status == status, r
    # the upstream's own body, not a proxy error page
    assert r.echo["path"] == "/status/%d" % status
    assert r.header("Content-Type") == "application/json"


def test_response_204_has_no_body(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/status/204", key=key)
    assert r.status == 204 and r.body == b"", r


def test_response_headers_unchanged(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/headers?X-Custom=abc&Set-Cookie=a%3D1&Set-Cookie=b%3D2"
              "&Cache-Control=no-store&ETag=%22v1%22&Link=%3C%2Fnext%3E%3B%20rel%3Dnext", key=key)
    assert r.status == 200, r
    assert r.header("X-Custom") == "abc", r
    assert r.header_all("Set-Cookie") == ["a=1", "b=2"], r
    assert r.header("Cache-Control") == "no-store", r
    assert r.header("ETag") == '"v1"', r
    assert r.header("Link") == "</next>; rel=next", r
    assert r.header("Server") == "e2e-upstream/1", r


def test_large_response_body_unchanged(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    n = 5 * 1024 * 1024 + 7
    r = p.get("/big/%d" % n, key=key)
    assert r.status == 200, r
    assert len(r.body) == n
    assert r.body == big_body(n)


def test_close_delimited_response_unchanged(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/close", key=key)
    assert r.status == 200, r
    assert r.echo["path"] == "/close"


def test_head_request(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    c = p.client()
    r = c.request("HEAD", "/big/1000", key=key)
    assert r.status == 200, r
    assert r.body == b""
    assert r.header("Content-Length") == "1000", r
    # the connection is still in step: the next request on it is answered correctly
    r = c.get("/after-head", key=key)
    assert r.status == 200 and r.echo["path"] == "/after-head", r
    c.close()


def test_requests_in_turn_do_not_inherit_each_others_method_body_or_headers(catalog, start_proxy):
    # One worker and one connection: each request goes out on the upstream handle the one
    # before it used, so anything a request leaves behind would show in the next.
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, proxy={"workers": 1})
    c = p.client()
    steps = [
        ("HEAD", "/big/10", None, [("X-Only-Head", "1")]),
        ("GET", "/after-head", None, []),
        ("POST", "/post", b"posted body", [("X-Only-Post", "1"), ("Content-Type", "text/plain")]),
        ("GET", "/after-post", None, []),
        ("PUT", "/put", b"", []),
        ("OPTIONS", "/options", None, []),
        ("DELETE", "/delete", b"gone", []),
        ("GET", "/last", None, []),
    ]
    for method, target, body, headers in steps:
        r = c.request(method, target, key=key, body=body, headers=headers)
        assert r.status == 200, (method, r)
        if method == "HEAD":
            assert r.body == b"" and r.header("Content-Length") == "10", r
            continue
        e = r.echo
        assert (e["method"], e["path"]) == (method, target), e
        assert e["body"] == (body or b""), e
        for name in ("X-Only-Head", "X-Only-Post", "Content-Type"):
            want = [v for n, v in headers if n == name]
            assert echo_header(e, name) == want, (method, target, e["headers"])
    c.close()


def test_environment_proxy_variables_are_not_used(catalog, start_proxy):
    # nginx and HAProxy go to the upstream they are given; so must we, whatever
    # http_proxy says in the environment the service was started from.
    import socket
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    dead_url = "http://127.0.0.1:%d" % dead.getsockname()[1]  # bound, never listening
    try:
        _, key = catalog.user_key("free")
        env = {v: dead_url for v in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")}
        env.update(no_proxy="", NO_PROXY="")
        p = start_proxy(catalog, env=env)
        r = p.get("/direct", key=key)
        assert r.status == 200, r
        assert r.echo["path"] == "/direct"
    finally:
        dead.close()


def test_expect_100_continue_upload(catalog, start_proxy):
    import socket
    from conftest import parse_raw_response
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    body = bytes(range(256)) * 64
    with socket.create_connection(("127.0.0.1", p.port), timeout=10) as s:
        s.sendall(("POST /expect HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                   "Content-Type: application/octet-stream\r\nContent-Length: %d\r\n"
                   "Expect: 100-continue\r\nConnection: close\r\n\r\n" % (key, len(body))).encode())
        # a client waits a moment for "100 Continue", then sends the body anyway (as curl does)
        s.settimeout(2)
        early = b""
        try:
            early = s.recv(65536)
        except socket.timeout:
            pass
        if early:
            assert early.startswith(b"HTTP/1.1 100"), early[:200]
        s.settimeout(10)
        s.sendall(body)
        raw = early.split(b"\r\n\r\n", 1)[1] if early else b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    r = parse_raw_response(raw)
    assert r.status == 200, raw[:300]
    e = r.json()
    assert e["length"] == len(body)
    assert e["body_sha256"] == hashlib.sha256(body).hexdigest()


# curl adds Accept to every request it sends, and Expect (over 1 MiB) and Content-Type to
# one with a body, unless told not to: the upstream must see only what the client sent.
@pytest.mark.parametrize("method,body", [
    ("GET", None),
    ("POST", BIG + BIG),                         # over curl's 1 MiB threshold for Expect
    ("POST", b"small"),
    ("POST", b""),
    ("PUT", b"x"),
    ("PATCH", b"{}"),
    ("DELETE", b"gone"),
    ("OPTIONS", None),
], ids=["GET", "POST-2MiB", "POST", "POST-empty", "PUT", "PATCH", "DELETE-with-body", "OPTIONS"])
def test_the_upstream_sees_no_header_that_curl_would_add(catalog, start_proxy, method, body):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.request(method, "/plain", key=key, body=body)
    assert r.status == 200, r
    e = r.echo
    assert e["body"] == (body or b""), e["length"]
    for name in ("Accept", "Expect", "Content-Type"):
        assert echo_header(e, name) == [], (name, e["headers"])
