"""The access log: one JSON object per request, never the API key; a rejected request
names user, limit type, current count and limit."""
import json

from conftest import wait_until


def test_access_log_lines(catalog, start_proxy):
    catalog.plan("two", "--rate", "2/min")
    user, key = catalog.user_key("two")
    p = start_proxy(catalog)
    for _ in range(3):
        p.get("/logged?q=1", key=key)
    p.get("/nokey")
    lines = wait_until(lambda: len(p.access_log_lines()) >= 4 and p.access_log_lines(), 10)
    assert lines and len(lines) == 4, p.access_log_lines()
    text = open(p.access_log).read()
    assert key not in text, "the API key is in the access log"
    for ln in lines:
        assert isinstance(ln, dict)
        values = json.dumps(ln)
        assert "GET" in values, ln

    def status(ln):
        return next((v for k, v in ln.items() if k in ("status", "code", "status_code")), None)
    # each request came on its own connection, so worker threads may write the lines in
    # a different order than the requests were made
    assert sorted(status(ln) for ln in lines) == [200, 200, 401, 429], lines
    rejected = [ln for ln in lines if status(ln) == 429][0]
    assert rejected.get("user_id") == user, rejected
    assert rejected.get("limit_type"), rejected
    assert rejected.get("limit") == 2, rejected
    assert rejected.get("current_count") == 2, rejected
    assert any("/logged" in str(v) for v in rejected.values()), rejected


def test_a_warning_line_on_stderr_names_user_and_limit(catalog, start_proxy):
    # one line stands for every rejection of that user and limit in 10 s
    # (test_operator_logs.py holds the window and the count)
    catalog.plan("one", "--rate", "1/min")
    user, key = catalog.user_key("one")
    p = start_proxy(catalog)
    assert p.get("/w", key=key).status == 200
    for _ in range(2):
        assert p.get("/w", key=key).status == 429

    def warnings():
        return [json.loads(ln) for ln in p.stderr().splitlines()
                if ln.startswith("{") and '"warn"' in ln]
    assert wait_until(lambda: len(warnings()) >= 1, 5), p.stderr()
    got = warnings()
    assert len(got) == 1, got
    w = got[0]
    assert (w["user_id"], w["limit_type"], w["current_count"], w["limit"], w["rejections"]) == \
        (user, "http", 1, 1, 1), w
    assert key not in p.stderr(), "the API key is on stderr"
