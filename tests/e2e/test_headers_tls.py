"""Operator's first hour, headers and TLS: `headers` takes a list of styles; ietf items are
named after plan, route and window; draft, x and the access log describe the same "closest"
limit; `upstream = https://...` works, verified against the system's CAs or
[proxy] upstream_ca_file, or not verified with upstream_tls_verify = no (warned at start).

The TLS upstreams are tests/e2e/upstream.py and ws_upstream.py with --tls-cert/--tls-key, on a
self-signed certificate made here with the openssl command (Debian package openssl)."""
import re
import subprocess

import pytest

from conftest import (HERE, PYTHON, SLOW, TIERPROXY_BIN, _clean_env, assert_json_error, require_program,
                      wait_until, write_ini)
from fleet_helpers import OP_TEXT, ws_connect, ws_try


# --------------------------------------------------------------------------------------
# a structured-field list parser (RFC 8941: items with parameters; strings with escapes)

def parse_sf_items(value):
    """'100;w=60, "a\\"b";q=5' -> [(100, {"w": 60}), ('a"b', {"q": 5})]. Raises on anything
    that is not a valid sf-list of bare items with parameters."""
    items, i, n = [], 0, len(value)

    def bare(i):
        if value[i] == '"':
            out, i = [], i + 1
            while value[i] != '"':
                c = value[i]
                if c == "\\":
                    i += 1
                    assert value[i] in '"\\', "bad escape in %r" % value
                    c = value[i]
                assert 0x20 <= ord(c) < 0x7f, "bad character in sf-string %r" % value
                out.append(c)
                i += 1
            return "".join(out), i + 1
        m = re.compile(r"-?\d{1,15}").match(value, i)
        if m:
            return int(m.group()), m.end()
        m = re.compile(r"[A-Za-z*][A-Za-z0-9_.:%*/+!#$&'^`|~-]*").match(value, i)
        assert m, "not a bare item at %d of %r" % (i, value)
        return m.group(), m.end()

    while i < n:
        v, i = bare(i)
        params = {}
        while i < n and value[i] == ";":
            m = re.compile(r"[a-z*][a-z0-9_.*-]*").match(value, i + 1)
            assert m, "bad parameter key in %r" % value
            k, i = m.group(), m.end()
            if i < n and value[i] == "=":
                params[k], i = bare(i + 1)
            else:
                params[k] = True
        items.append((v, params))
        while i < n and value[i] == " ":
            i += 1
        if i < n:
            assert value[i] == ",", "expected ',' at %d of %r" % (i, value)
            i += 1
            while i < n and value[i] == " ":
                i += 1
            assert i < n, "trailing comma in %r" % value
    return items


def one_field(r, name):
    values = r.header_all(name)
    assert len(values) == 1, "%s should be one field, got %r" % (name, values)
    return values[0]


def last_log(p, path):
    def find():
        lines = [ln for ln in p.access_log_lines() if ln.get("path") == path]
        return lines[-1] if lines else None
    assert wait_until(lambda: find() is not None, 5), p.access_log_lines()
    return find()


def run_check(ini_path):
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(ini_path), "--check"], capture_output=True,
                        text=True, timeout=60, env=_clean_env(None), stdin=subprocess.DEVNULL)
    return cp.returncode, cp.stdout + cp.stderr


def line_of(path, text):
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if ln.startswith(text):
            return i
    raise AssertionError("%r not in %s" % (text, path))


# --------------------------------------------------------------------------------------
# headers = a list of styles

def test_two_styles_each_emitted_and_policy_is_one_field_draft_first(catalog, start_proxy):
    catalog.plan("duo", "--rate", "5/10s")
    _, key = catalog.user_key("duo")
    p = start_proxy(catalog, limits={"headers": "draft, ietf"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    # draft
    assert r.header("RateLimit-Limit") == "5", r
    assert r.header("RateLimit-Remaining") == "4", r
    # ietf
    state = parse_sf_items(one_field(r, "RateLimit"))
    assert state == [("duo-10s", {"r": 4, "t": state[0][1]["t"]})], r
    # both share RateLimit-Policy: one field, the draft item first, then the ietf items
    policy = parse_sf_items(one_field(r, "RateLimit-Policy"))
    assert policy == [(5, {"w": 10}), ("duo-10s", {"q": 5, "w": 10})], r


def test_x_and_ietf_together(catalog, start_proxy):
    catalog.plan("xi", "--rate", "5/10s")
    _, key = catalog.user_key("xi")
    p = start_proxy(catalog, limits={"headers": "x,ietf"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert r.header("X-RateLimit-Limit") == "5", r
    assert r.header("X-RateLimit-Remaining") == "4", r
    assert parse_sf_items(one_field(r, "RateLimit-Policy")) == [("xi-10s", {"q": 5, "w": 10})], r
    assert not r.has_header("RateLimit-Limit"), r


def test_all_three_styles(catalog, start_proxy):
    catalog.plan("tri", "--rate", "5/10s")
    _, key = catalog.user_key("tri")
    p = start_proxy(catalog, store="memory", limits={"headers": "ietf, x, draft"})
    r = p.get("/h", key=key)
    assert r.status == 200, r
    assert r.header("X-RateLimit-Remaining") == "4" and r.header("RateLimit-Remaining") == "4", r
    # the draft item comes first whatever order the styles were listed in
    policy = parse_sf_items(one_field(r, "RateLimit-Policy"))
    assert policy == [(5, {"w": 10}), ("tri-10s", {"q": 5, "w": 10})], r


@pytest.mark.parametrize("value,why", [
    ("off, draft", r"off.*(alone|combined|with)"),
    ("draft, off", r"off.*(alone|combined|with)"),
    ("draft, draft", r"draft.*(twice|more than once|duplicate)"),
    ("draft, bogus", r"bogus"),
])
def test_bad_style_lists_name_file_line_key(proxies, catalog, tmp_path, value, why):
    ini = proxies.config(catalog, store="memory", limits={"headers": value})
    path = tmp_path / "bad.ini"
    write_ini(path, ini)
    rc, out = run_check(path)
    assert rc == 1, out
    assert "%s:%d" % (path, line_of(path, "headers")) in out, out
    assert "headers" in out, out
    assert re.search(why, out, re.I), out


def test_style_list_accepted_by_check(proxies, catalog, tmp_path):
    ini = proxies.config(catalog, store="memory", limits={"headers": "draft, ietf"})
    path = tmp_path / "good.ini"
    write_ini(path, ini)
    rc, out = run_check(path)
    assert rc == 0, out


# --------------------------------------------------------------------------------------
# ietf item names

def test_ietf_items_named_after_plan_route_and_window(catalog, start_proxy):
    catalog.plan("pro2", "--rate", "100/min", "--concurrency", "5")
    catalog.limit("pro2", "--rate", "10/10s", "--route", "POST /upload")
    catalog.limit("pro2", "--rate", "7/2h", "--route", "* /any")
    _, key = catalog.user_key("pro2")
    p = start_proxy(catalog, limits={"headers": "ietf"})
    r = p.request("POST", "/upload/x", key=key, body=b"abc")
    assert r.status == 200, r
    policy = dict(parse_sf_items(one_field(r, "RateLimit-Policy")))
    assert set(policy) == {"pro2-1min", "pro2-POST /upload-10s", "pro2-concurrency"}, r
    assert policy["pro2-POST /upload-10s"] == {"q": 10, "w": 10}, r
    assert policy["pro2-concurrency"] == {"q": 5, "qu": "concurrent-requests"}, r
    state = dict(parse_sf_items(one_field(r, "RateLimit")))
    assert set(state) == set(policy), r
    assert state["pro2-POST /upload-10s"]["r"] == 9, r
    r = p.get("/any/thing", key=key)
    assert set(dict(parse_sf_items(one_field(r, "RateLimit-Policy")))) == \
        {"pro2-1min", "pro2-* /any-2h", "pro2-concurrency"}, r
    r = p.get("/other", key=key)
    assert set(dict(parse_sf_items(one_field(r, "RateLimit-Policy")))) == \
        {"pro2-1min", "pro2-concurrency"}, r


def test_window_names_use_the_largest_exact_unit(catalog, start_proxy):
    catalog.plan("win", "--rate", "5/90s")
    for flags in (["--rate", "6/120s"], ["--rate", "7/3600s"], ["--rate", "8/day"],
                  ["--rate", "9/1s"]):
        catalog.limit("win", *flags)
    _, key = catalog.user_key("win")
    p = start_proxy(catalog, store="memory", limits={"headers": "ietf"})
    r = p.get("/w", key=key)
    assert r.status == 200, r
    policy = dict(parse_sf_items(one_field(r, "RateLimit-Policy")))
    assert policy == {"win-90s": {"q": 5, "w": 90}, "win-2min": {"q": 6, "w": 120},
                      "win-1h": {"q": 7, "w": 3600}, "win-1day": {"q": 8, "w": 86400},
                      "win-1s": {"q": 9, "w": 1}}, r


def test_ietf_route_with_a_quote_is_a_valid_sf_string(catalog, start_proxy):
    # a '"' in a route is escaped in the item name (a backslash, which the name escapes
    # too, cannot reach a route: a target with one is refused, SPEC "One request model";
    # test_ratelimit_headers.c covers its escaping)
    catalog.plan("esc", "--rate", "100/min")
    catalog.limit("esc", "--rate", "4/10s", "--route", 'GET /a"b')
    _, key = catalog.user_key("esc")
    p = start_proxy(catalog, store="memory", limits={"headers": "ietf"})
    r = p.get('/a"b/d', key=key)
    assert r.status == 200, r
    raw = one_field(r, "RateLimit-Policy")
    assert '"esc-GET /a\\"b-10s"' in raw, raw
    assert set(dict(parse_sf_items(raw))) == {"esc-1min", 'esc-GET /a"b-10s'}, raw


def test_same_plan_route_and_window_twice_gets_distinct_names(catalog, start_proxy):
    catalog.plan("twin", "--rate", "100/min")
    catalog.limit("twin", "--rate", "50/min", "--algorithm", "fixed-window")
    _, key = catalog.user_key("twin")
    p = start_proxy(catalog, store="memory", limits={"headers": "ietf"})
    r = p.get("/t", key=key)
    # an ordinal, never the catalog's limit id, tells them apart
    names = [n for n, _ in parse_sf_items(one_field(r, "RateLimit-Policy"))]
    assert names == ["twin-1min", "twin-1min-2"], r


# --------------------------------------------------------------------------------------
# one "closest limit" rule for draft, x and the access log

def test_demo_plan_log_and_headers_agree(catalog, start_proxy):
    # the default free plan (100/min and concurrency 10), as in etc/demo.sh
    _, key = catalog.user_key("free")
    p = start_proxy(catalog, limits={"headers": "draft"})
    r = p.get("/demo", key=key)
    assert r.status == 200, r
    assert (r.header("RateLimit-Limit"), r.header("RateLimit-Remaining")) == ("100", "99"), r
    line = last_log(p, "/demo")
    assert (line.get("limit"), line.get("remaining")) == (100, 99), line


def test_closest_rate_limit_in_log_headers_and_x(catalog, start_proxy):
    catalog.plan("near", "--rate", "100/min", "--concurrency", "10")
    catalog.limit("near", "--rate", "3/10s")
    _, key = catalog.user_key("near")
    p = start_proxy(catalog, limits={"headers": "draft, x"})
    for i in range(3):
        r = p.get("/n%d" % i, key=key)
        assert r.status == 200, r
        want = str(2 - i)
        assert (r.header("RateLimit-Limit"), r.header("RateLimit-Remaining")) == ("3", want), r
        assert (r.header("X-RateLimit-Limit"), r.header("X-RateLimit-Remaining")) == ("3", want), r
        line = last_log(p, "/n%d" % i)
        assert (line.get("limit"), line.get("remaining")) == (3, 2 - i), line
    r = p.get("/n3", key=key)
    assert r.status == 429, r
    assert (r.header("RateLimit-Limit"), r.header("RateLimit-Remaining")) == ("3", "0"), r
    line = last_log(p, "/n3")
    assert (line.get("limit"), line.get("remaining")) == (3, 0), line


# --------------------------------------------------------------------------------------
# https upstreams

def make_cert(tmp_path, name, san):
    openssl = require_program("openssl", "openssl")
    cert, key = tmp_path / (name + ".crt"), tmp_path / (name + ".key")
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
                    "-days", "2", "-subj", "/CN=tierproxy-test", "-addext",
                    "subjectAltName=" + san, "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


class TlsServer:
    def __init__(self, script, tmp_path, cert, key):
        self.err = tmp_path / ("%s-tls.err" % script)
        with open(self.err, "ab") as err:
            self.proc = subprocess.Popen([PYTHON, str(HERE / script), "--port", "0",
                                          "--tls-cert", str(cert), "--tls-key", str(key)],
                                         stdout=subprocess.PIPE, stderr=err,
                                         stdin=subprocess.DEVNULL)
        line = self.proc.stdout.readline()
        assert line.strip(), "%s did not start: %s" % (script, self.err.read_text())
        self.port = int(line)
        self.url = "https://127.0.0.1:%d" % self.port

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()


@pytest.fixture
def tls_cert(tmp_path):
    return make_cert(tmp_path, "upstream", "IP:127.0.0.1,DNS:localhost")


@pytest.fixture
def tls_servers(tmp_path):
    made = []

    def make(cert, script="upstream.py"):
        s = TlsServer(script, tmp_path, cert[0], cert[1])
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def test_https_upstream_verified_with_ca_file(catalog, proxies, tls_cert, tls_servers):
    up = tls_servers(tls_cert)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_ca_file": str(tls_cert[0])})
    r = p.get("/over/tls?q=1", key=key)
    assert r.status == 200, r
    assert r.json()["path"] == "/over/tls?q=1", r
    r = p.request("POST", "/post", key=key, body=b"x" * 100000)
    assert r.status == 200 and r.json()["length"] == 100000, r


def test_https_upstream_self_signed_refused_by_default(catalog, proxies, tls_cert, tls_servers):
    up = tls_servers(tls_cert)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url)
    r = p.get("/x", key=key)
    assert_json_error(r, 502, {"error_code": "upstream_unavailable"})
    # the operator can see why
    assert wait_until(lambda: re.search(r"certificate", p.stderr(), re.I), 5), p.stderr()


def test_https_upstream_name_must_match_the_certificate(catalog, proxies, tmp_path, tls_servers):
    cert = make_cert(tmp_path, "other", "DNS:elsewhere.example")
    up = tls_servers(cert)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_ca_file": str(cert[0])})
    r = p.get("/x", key=key)
    assert_json_error(r, 502, {"error_code": "upstream_unavailable"})
    assert wait_until(lambda: re.search(r"host name|does not match|mismatch", p.stderr(), re.I), 5), \
        p.stderr()


def test_https_upstream_verification_off_warns_at_start(catalog, proxies, tls_cert, tls_servers):
    up = tls_servers(tls_cert)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_tls_verify": "no"})
    r = p.get("/x", key=key)
    assert r.status == 200, r
    assert re.search(r"warn.*upstream_tls_verify|upstream_tls_verify.*not verified",
                     p.stderr(), re.I), p.stderr()


def test_verification_on_gives_no_warning(catalog, proxies):
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, proxy={"upstream_tls_verify": "yes"})
    assert p.get("/x", key=key).status == 200
    assert "upstream_tls_verify" not in p.stderr(), p.stderr()


def test_mixed_http_and_https_upstreams(catalog, proxies, upstream, tls_cert, tls_servers):
    up = tls_servers(tls_cert)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstreams=[upstream.url, up.url],
                      proxy={"upstream_ca_file": str(tls_cert[0])})
    ports = set()
    for i in range(6):
        r = p.get("/mix%d" % i, key=key)
        assert r.status == 200, r
        ports.add(r.json()["upstream_port"])
    assert ports == {upstream.port, up.port}, ports


def test_missing_ca_file_is_a_config_error(proxies, catalog, tmp_path):
    ini = proxies.config(catalog, store="memory",
                         proxy={"upstream_ca_file": str(tmp_path / "nope.pem")})
    path = tmp_path / "ca.ini"
    write_ini(path, ini)
    rc, out = run_check(path)
    assert rc == 1, out
    assert "%s:%d" % (path, line_of(path, "upstream_ca_file")) in out, out
    assert "upstream_ca_file" in out and "nope.pem" in out, out


# --------------------------------------------------------------------------------------
# WebSocket to an https upstream (wss)

def test_websocket_over_tls_with_ca_file(catalog, proxies, tls_cert, tls_servers):
    up = tls_servers(tls_cert, "ws_upstream.py")
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_ca_file": str(tls_cert[0])})
    w = ws_connect(p.port, "/echo", key=key)
    try:
        assert w.resp.status == 101
        for text in ("over tls", "x" * 70000):
            w.send_text(text)
            assert w.recv_message() == (OP_TEXT, text.encode())
    finally:
        w.close()


def test_websocket_over_tls_unverified_is_refused(catalog, proxies, tls_cert, tls_servers):
    up = tls_servers(tls_cert, "ws_upstream.py")
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url)
    r = ws_try(p.port, "/echo", key=key)
    assert_json_error(r, 502, {"error_code": "upstream_unavailable"})
    assert up.proc.poll() is None
    # the operator can see why
    assert wait_until(lambda: re.search(r"certificate", p.stderr(), re.I), 5), p.stderr()


def test_websocket_over_tls_verification_off(catalog, proxies, tls_cert, tls_servers):
    up = tls_servers(tls_cert, "ws_upstream.py")
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_tls_verify": "no"})
    w = ws_connect(p.port, "/echo", key=key)
    try:
        w.send_text("hi")
        assert w.recv_message() == (OP_TEXT, b"hi")
    finally:
        w.close()


def test_websocket_over_tls_name_must_match_the_certificate(catalog, proxies, tmp_path, tls_servers):
    cert = make_cert(tmp_path, "other", "DNS:elsewhere.example")
    up = tls_servers(cert, "ws_upstream.py")
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_ca_file": str(cert[0])})
    r = ws_try(p.port, "/echo", key=key)
    assert_json_error(r, 502, {"error_code": "upstream_unavailable"})
    assert wait_until(lambda: re.search(r"mismatch", p.stderr(), re.I), 5), p.stderr()


def test_websocket_to_mixed_http_and_https_upstreams(catalog, proxies, tmp_path, tls_cert, tls_servers):
    from fleet_helpers import WsUpstream
    plain = WsUpstream(tmp_path / "plain")
    try:
        up = tls_servers(tls_cert, "ws_upstream.py")
        _, key = catalog.user_key("free")
        p = proxies.start(catalog, upstreams=[plain.url, up.url],
                          proxy={"upstream_ca_file": str(tls_cert[0]), "workers": 1})
        for i in range(4):
            w = ws_connect(p.port, "/echo", key=key)
            try:
                w.send_text("m%d" % i)
                assert w.recv_message() == (OP_TEXT, b"m%d" % i)
            finally:
                w.close()
        # both upstreams took tunnels
        assert sum(plain.stats()["ws_total"].values()) == 2
    finally:
        plain.close()


def test_reload_turns_verification_on_for_http_and_websocket(catalog, proxies, tls_cert, tls_servers):
    # the settings apply to every transfer after a SIGHUP: curl's pooled handles and kept-alive
    # connections made without verification are not used as if verified
    import signal
    up = tls_servers(tls_cert, "ws_upstream.py")
    _, key = catalog.user_key("free")
    # the connect timeout covers the TLS handshake, with a Python server on the other end: on
    # a box that runs two suites at once, 2 s (the harness's) was seen to pass by
    p = proxies.start(catalog, upstream=up.url,
                      proxy={"upstream_tls_verify": "no", "workers": 1, "connect_timeout_ms": int(10000 * SLOW)})
    c = p.client()
    assert c.get("/a", key=key).status == 200
    w = ws_connect(p.port, "/echo", key=key)
    w.close()
    ini = dict(p.ini)
    ini["proxy"] = dict(ini["proxy"], upstream_tls_verify="yes")
    write_ini(p.ini_path, ini)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: "reloaded" in p.stderr(), 5), p.stderr()
    assert_json_error(c.get("/b", key=key), 502, {"error_code": "upstream_unavailable"})
    assert_json_error(ws_try(p.port, "/echo", key=key), 502, {"error_code": "upstream_unavailable"})
    c.close()


def test_reload_that_turns_verification_off_warns(catalog, proxies, tls_cert, tls_servers):
    # an operator who turns verification off with a SIGHUP is told, as at start
    import signal
    up = tls_servers(tls_cert)
    _, key = catalog.user_key("free")
    p = proxies.start(catalog, upstream=up.url, proxy={"upstream_ca_file": str(tls_cert[0])})
    assert p.get("/a", key=key).status == 200
    assert "upstream_tls_verify" not in p.stderr(), p.stderr()
    ini = dict(p.ini)
    ini["proxy"] = dict(ini["proxy"], upstream_tls_verify="no")
    write_ini(p.ini_path, ini)
    p.signal(signal.SIGHUP)
    assert wait_until(lambda: "reloaded" in p.stderr(), 5), p.stderr()
    assert re.search(r"warn.*upstream_tls_verify.*not verified", p.stderr(), re.I), p.stderr()
