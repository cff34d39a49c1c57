"""What is matched is what is forwarded (SPEC "One request model"): the request target as
exempt paths, route limits and the upstream all see it — absolute-form, asterisk-form,
bad encodings, dot segments, repeated slashes, path_case — and the header rewrites:
underscored names, X-Tier-* spoofs, X-Forwarded-For as one list."""
import subprocess

import pytest

from conftest import (TIERPROXY_BIN, _clean_env, assert_json_error, echo_header, parse_raw_response,
                      raw_exchange, write_ini)


def wide(catalog, name="wide"):
    catalog.plan(name, "--rate", "1000000/min")
    return catalog.user_key(name)


def raw(p, data):
    out = raw_exchange(p.port, data, timeout=5)
    assert out, "no answer to %r" % data[:80]
    return parse_raw_response(out)


def routed(catalog, route, rate="1/30s"):
    catalog.plan("routed", "--rate", "1000/min")
    catalog.limit("routed", "--rate", rate, "--route", route)
    return catalog.user_key("routed")


# --------------------------------------------------------------------------------------
# absolute-form and asterisk-form

def test_absolute_form_is_matched_and_forwarded_as_its_path(catalog, proxies):
    _, key = routed(catalog, "GET /expensive")
    p = proxies.start(catalog)
    req = (b"GET http://api.example/expensive?q=1 HTTP/1.1\r\nHost: other.example\r\n"
           b"Authorization: Bearer " + key.encode() + b"\r\nConnection: close\r\n\r\n")
    first = raw(p, req)
    assert first.status == 200, first
    e = first.echo
    assert e["path"] == "/expensive?q=1", e["path"]
    # RFC 9112 3.2.2: the authority of an absolute-form target replaces Host
    assert echo_header(e, "Host") == ["api.example"], e["headers"]
    assert echo_header(e, "X-Forwarded-Host") == ["api.example"], e["headers"]
    second = raw(p, req)
    assert second.status == 429, "absolute-form escaped the route limit: %r" % second
    # the origin-form spelling shares the same limit
    assert p.get("/expensive", key=key).status == 429


def test_absolute_form_without_a_path_is_the_root(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    r = raw(p, b"GET http://api.example?x=1 HTTP/1.1\r\nHost: api.example\r\nAuthorization: Bearer "
            + key.encode() + b"\r\nConnection: close\r\n\r\n")
    assert r.status == 200, r
    assert r.echo["path"] == "/?x=1", r.echo["path"]


@pytest.mark.parametrize("target", [b"ftp://api.example/x", b"http:///x", b"http://u:p@api.example/x",
                                    b"api.example:80", b"x/y"])
def test_other_target_forms_are_bad_request_targets(catalog, proxies, target):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    r = raw(p, b"GET " + target + b" HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
            + key.encode() + b"\r\nConnection: close\r\n\r\n")
    assert r.status == 400, (target, r)
    assert r.json()["error_code"] == "bad_request_target", r.body


def test_asterisk_form_only_for_options(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    r = p.request("OPTIONS", "*", key=key)
    assert r.status == 200, r
    assert r.echo["path"] == "*", r.echo["path"]
    r = p.get("*", key=key)
    assert_json_error(r, 400, {"error_code": "bad_request_target"})


# --------------------------------------------------------------------------------------
# encodings that are refused

@pytest.mark.parametrize("target", ["/a%00b", "/a%2Fb", "/a%2fb", "/a%5Cb", "/a%5cb", "/a\\b",
                                    "/a/b%2F..%2F", "/a#frag"])
def test_bad_path_encodings_are_400(catalog, proxies, target):
    _, key = wide(catalog)
    p = proxies.start(catalog)
    r = p.get(target, key=key)
    assert_json_error(r, 400, {"error_code": "bad_request_target"})
    # the query is not the path: the same bytes there are forwarded untouched
    q = "/q?v=" + target.lstrip("/").replace("#", "%23")
    r = p.get(q, key=key)
    assert r.status == 200 and r.echo["path"] == q, (q, r)


def test_nul_then_dot_segments_do_not_pass_as_exempt(catalog, proxies):
    p = proxies.start(catalog, proxy={"exempt_paths": "/public"})
    r = p.get("/public%00/../admin")
    assert_json_error(r, 400, {"error_code": "bad_request_target"})


# --------------------------------------------------------------------------------------
# dot segments and repeated slashes: removed before matching, and what the upstream gets

def test_dot_segments_normalised_matched_and_forwarded(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog, proxy={"exempt_paths": "/public"})
    # not exempt: /public/../admin is /admin
    assert_json_error(p.get("/public/../admin"), 401, {"error_code": "missing_api_key"})
    for target, forwarded in (("/public/../admin", "/admin"), ("//admin", "/admin"),
                              ("/a/./b/%2e%2E/c?x=/../y//z", "/a/c?x=/../y//z"),
                              ("/a/b/.", "/a/b/"), ("/../../x", "/x"), ("/a//b///", "/a/b/"),
                              ("/%7Euser/%41%62c", "/%7Euser/%41%62c"), ("/a%20b/%c3%a9", "/a%20b/%c3%a9"),
                              ("/a/.%2E/%2e/b%2E", "/b%2E")):
        r = p.get(target, key=key)
        assert r.status == 200, (target, r)
        assert r.echo["path"] == forwarded, (target, r.echo["path"])
    # an exempt path spelled with dot segments is still exempt, and forwarded normalised
    r = p.get("/x/../public/page")
    assert r.status == 200 and r.echo["path"] == "/public/page", r


def test_encoded_unreserved_characters_match_but_are_forwarded_as_sent(catalog, proxies):
    _, key = routed(catalog, "GET /upload")
    p = proxies.start(catalog, proxy={"exempt_paths": "/public"})
    r = p.get("/%75pload/x", key=key)
    assert r.status == 200 and r.echo["path"] == "/%75pload/x", r
    assert p.get("/upload", key=key).status == 429
    r = p.get("/%70ublic/%2e%2E/%70ublic/x")
    assert r.status == 200 and r.echo["path"] == "/%70ublic/x", r


def test_repeated_slashes_hit_the_route_limit(catalog, proxies):
    # (upstream.py's http.server merges leading slashes itself: the inner ones show what
    # the proxy forwarded)
    _, key = routed(catalog, "GET /admin/x")
    p = proxies.start(catalog)
    r = p.get("//admin//x", key=key)
    assert r.status == 200 and r.echo["path"] == "/admin/x", r
    assert p.get("/admin/x", key=key).status == 429


# --------------------------------------------------------------------------------------
# path_case

def test_path_case_insensitive_matches_routes_and_exempt_paths(catalog, proxies):
    _, key = routed(catalog, "POST /upload")
    p = proxies.start(catalog, proxy={"path_case": "insensitive", "exempt_paths": "/Public"})
    assert p.request("POST", "/upload", key=key, body=b"1").status == 200
    r = p.request("POST", "/UPLOAD", key=key, body=b"2")
    assert r.status == 429, "/UPLOAD escaped POST /upload: %r" % r
    r = p.get("/PUBLIC/x")
    assert r.status == 200 and r.echo["path"] == "/PUBLIC/x", r


def test_path_case_sensitive_by_default(catalog, proxies):
    _, key = routed(catalog, "POST /upload")
    p = proxies.start(catalog, proxy={"exempt_paths": "/public"})
    assert p.request("POST", "/upload", key=key, body=b"1").status == 200
    assert p.request("POST", "/UPLOAD", key=key, body=b"2").status == 200
    assert_json_error(p.get("/PUBLIC/x"), 401, {"error_code": "missing_api_key"})


# --------------------------------------------------------------------------------------
# header names with an underscore

SPOOFS = [("X_Tier_User", "admin"), ("x_tier_plan", "pro"), ("X-Tier_User", "admin3"),
          ("X_Forwarded_For", "10.9.9.9"), ("X_Custom", "1")]


def test_underscored_headers_are_dropped_by_default(catalog, proxies):
    user, key = wide(catalog)
    p = proxies.start(catalog, proxy={"exempt_paths": "/public"})
    for target, kw in (("/x", {"key": key}), ("/public/x", {})):
        e = p.get(target, headers=SPOOFS + [("X-Kept", "yes")], **kw).echo
        names = [k for k, _ in e["headers"]]
        assert not any("_" in n for n in names), e["headers"]
        assert echo_header(e, "X-Kept") == ["yes"], e["headers"]
        if kw:
            assert echo_header(e, "X-Tier-User") == [user], e["headers"]


def test_underscored_headers_forwarded_on_request_but_never_tier_ones(catalog, proxies):
    user, key = wide(catalog)
    p = proxies.start(catalog, proxy={"underscores_in_headers": "forward"})
    e = p.get("/x", key=key, headers=SPOOFS).echo
    names = [k.lower() for k, _ in e["headers"]]
    assert echo_header(e, "X_Custom") == ["1"], e["headers"]
    assert not any(n.replace("_", "-").startswith("x-tier-") and n not in ("x-tier-user", "x-tier-plan")
                   for n in names), e["headers"]
    assert echo_header(e, "X-Tier-User") == [user], e["headers"]
    assert "x_forwarded_for" not in names, e["headers"]


@pytest.mark.parametrize("key, good, bad", [("underscores_in_headers", "forward", "maybe"),
                                           ("path_case", "insensitive", "upper")])
def test_new_proxy_settings_are_checked(catalog, proxies, tmp_path, key, good, bad):
    for value, rc in ((good, 0), (bad, 1)):
        ini = proxies.config(catalog, store="memory")
        ini["proxy"][key] = value
        path = tmp_path / ("%s-%s.ini" % (key, value))
        write_ini(path, ini)
        cp = subprocess.run([TIERPROXY_BIN, "-c", str(path), "--check"], capture_output=True, text=True,
                            timeout=60, env=_clean_env(), stdin=subprocess.DEVNULL)
        assert cp.returncode == rc, (value, cp.stderr)
        if rc:
            assert key in cp.stderr, cp.stderr


# --------------------------------------------------------------------------------------
# X-Forwarded-For: several fields are one list

def test_several_xff_fields_are_one_list(catalog, proxies):
    catalog.plan("anon", "--rate", "2/30s")
    p = proxies.start(catalog, auth={"anonymous_plan": "anon"},
                      proxy={"trusted_proxies": "127.0.0.3/32"})
    # the client writes the first line, the load balancer appends the second: a fresh
    # spoofed first line each time is still the one client 203.0.113.7
    st = []
    for i in range(3):
        r = p.get("/x", source="127.0.0.3",
                  headers=[("X-Forwarded-For", "198.51.100.%d" % i), ("X-Forwarded-For", "203.0.113.7")])
        st.append(r.status)
        if i == 0:
            xff = echo_header(r.echo, "X-Forwarded-For")
            assert xff == ["198.51.100.0, 203.0.113.7, 127.0.0.3"], r.echo["headers"]
    assert st == [200, 200, 429], st


def test_long_xff_chain_is_forwarded_uncut(catalog, proxies):
    _, key = wide(catalog)
    p = proxies.start(catalog, proxy={"trusted_proxies": "127.0.0.3/32"})
    chain = ["10.%d.%d.%d" % (i // 65536, i // 256 % 256, i % 256) for i in range(300)]
    half = len(chain) // 2
    r = p.get("/x", key=key, source="127.0.0.3",
              headers=[("X-Forwarded-For", ", ".join(chain[:half])),
                       ("X-Forwarded-For", ", ".join(chain[half:]))])
    assert r.status == 200, r
    xff = echo_header(r.echo, "X-Forwarded-For")
    assert len(xff) == 1, r.echo["headers"]
    assert [a.strip() for a in xff[0].split(",")] == chain + ["127.0.0.3"], xff[0][-200:]
