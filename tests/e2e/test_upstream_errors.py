"""What a client sees when the upstream fails, or the request is too big or malformed:
502, 504, 413, 400/431 — every error body JSON."""
import time

from conftest import (assert_json_error, free_port, parse_raw_response, raw_exchange)


def test_upstream_refuses_is_502(catalog, start_proxy):
    _, key = catalog.user_key("free")
    dead = "http://127.0.0.1:%d" % free_port()      # nothing listens there
    p = start_proxy(catalog, upstream=dead)
    r = p.get("/x", key=key)
    assert_json_error(r, 502, {"error_code": "upstream_unavailable"})


def test_upstream_drops_connection_is_502(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/drop", key=key)
    assert_json_error(r, 502, {"error_code": "upstream_unavailable"})
    # the proxy is fine afterwards
    assert p.get("/x", key=key).status == 200


def test_upstream_too_slow_is_504(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, proxy={"upstream_timeout_ms": 500})
    t0 = time.monotonic()
    r = p.get("/hang", key=key)
    took = time.monotonic() - t0
    assert_json_error(r, 504, {"error_code": "upstream_timeout"})
    assert took < 10, "504 after %.1fs with upstream_timeout_ms = 500" % took
    # slower than nothing but within the timeout is fine
    assert p.get("/slow/100", key=key).status == 200


def test_body_over_max_body_bytes_is_413(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, proxy={"max_body_bytes": 1000})
    r = p.request("POST", "/up", key=key, body=b"a" * 1000)
    assert r.status == 200, r
    assert r.echo["length"] == 1000
    r = p.request("POST", "/up", key=key, body=b"a" * 1001)
    assert_json_error(r, 413)
    # a chunked body (no Content-Length up front) is held to the same cap
    r = p.request("POST", "/up", key=key, body=b"b" * 5000, chunked=True)
    assert_json_error(r, 413)


def test_oversized_request_head_is_400_or_431(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    raw = raw_exchange(p.port, b"GET /x HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " +
                       key.encode() + b"\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n")
    assert raw, "no answer to an oversized head"
    assert_json_error(parse_raw_response(raw), 431)


def test_malformed_request_head_is_400(catalog, start_proxy):
    p = start_proxy(catalog)
    raw = raw_exchange(p.port, b"THIS IS NOT HTTP\r\n\r\n")
    assert raw, "no answer to a malformed head"
    assert_json_error(parse_raw_response(raw), 400, {"error_code": "malformed_request"})


def test_head_errors_have_json_bodies(catalog, start_proxy):
    # Every error body is a problem (application/problem+json), for a head over the
    # 16 KiB limit whether or not it would fit libmicrohttpd's 32 KiB connection buffer
    # (the 200 KB case above).
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    raw = raw_exchange(p.port, b"GET /x HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * 20000 +
                       b"\r\n\r\n")
    r = parse_raw_response(raw)
    assert r.status == 431, raw[:300]
    assert_json_error(r, 431)
