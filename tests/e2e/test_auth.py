"""What a client sees: API keys. 401 answers, and limits that count per user, not per key."""
from conftest import assert_json_error


def test_missing_key_is_401_with_bearer_challenge(catalog, start_proxy):
    p = start_proxy(catalog)
    r = p.get("/hello")
    assert_json_error(r, 401, {"error_code": "missing_api_key"})
    assert (r.header("WWW-Authenticate") or "").startswith("Bearer"), r


def test_bearer_with_empty_key_is_missing(catalog, start_proxy):
    p = start_proxy(catalog)
    r = p.get("/hello", headers=[("Authorization", "Bearer ")])
    assert r.status == 401, r
    assert (r.header("WWW-Authenticate") or "").startswith("Bearer"), r


def test_unknown_key_is_401_invalid(catalog, start_proxy):
    catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/hello", key="tp_this-key-was-never-issued-0123456789abcdef")
    assert_json_error(r, 401, {"error_code": "invalid_api_key"})
    assert (r.header("WWW-Authenticate") or "").startswith("Bearer"), r


def test_revoked_key_is_401_invalid(catalog, start_proxy):
    user, key = catalog.user_key("free")
    good = catalog.key(user)
    ids = catalog.key_ids(user)
    assert len(ids) == 2, ids
    catalog.run("key", "revoke", ids[0])
    p = start_proxy(catalog)
    answers = {k: p.get("/hello", key=k).status for k in (key, good)}
    # exactly one of the two keys was revoked; the other still works
    assert sorted(answers.values()) == [200, 401], answers
    revoked = [k for k, s in answers.items() if s == 401][0]
    r = p.get("/hello", key=revoked)
    assert_json_error(r, 401, {"error_code": "invalid_api_key"})
    assert (r.header("WWW-Authenticate") or "").startswith("Bearer"), r


def test_valid_key_is_forwarded(catalog, start_proxy):
    user, key = catalog.user_key("free")
    p = start_proxy(catalog)
    r = p.get("/hello", key=key)
    assert r.status == 200, r
    assert r.echo["path"] == "/hello"


def test_key_in_custom_header(catalog, start_proxy):
    user, key = catalog.user_key("free")
    p = start_proxy(catalog, auth={"key_header": "X-Api-Key"})
    r = p.get("/hello", headers=[("X-Api-Key", key)])
    assert r.status == 200, r
    # the bare key in the configured header; the header is stripped before forwarding
    assert not any(k.lower() == "x-api-key" for k, _ in r.echo["headers"]), r.echo["headers"]
    r = p.get("/hello")
    assert_json_error(r, 401, {"error_code": "missing_api_key"})
    r = p.get("/hello", headers=[("X-Api-Key", "nope-not-a-key")])
    assert_json_error(r, 401, {"error_code": "invalid_api_key"})


def test_all_keys_of_a_user_share_limits(catalog, start_proxy):
    catalog.plan("four", "--rate", "4/30s")
    user, key_a = catalog.user_key("four")
    key_b = catalog.key(user)
    other, key_c = catalog.user_key("four")
    p = start_proxy(catalog)
    # two requests on each key use up the user's four
    for k in (key_a, key_b, key_a, key_b):
        r = p.get("/shared", key=k)
        assert r.status == 200, r
    for k in (key_a, key_b):
        r = p.get("/shared", key=k)
        assert r.status == 429, r
    # another user on the same plan has limits of their own
    r = p.get("/shared", key=key_c)
    assert r.status == 200, r
