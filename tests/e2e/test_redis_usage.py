"""How the proxy uses Redis while serving: no command that walks the keyspace."""
import re
import socket
import time

from conftest import ietf_state, resp_encode


def test_no_keyspace_walks_while_serving(catalog, proxies, redis_factory):
    catalog.plan("multi", "--rate", "100/min", "--concurrency", "5")
    catalog.limit("multi", "--rate", "10/10s")
    catalog.limit("multi", "--rate", "3/10s", "--route", "POST /w")
    _, key = catalog.user_key("multi")
    rd = redis_factory()
    p = proxies.start(catalog, store="redis", redis=rd)
    assert p.get("/warm", key=key).status == 200
    mon = socket.create_connection(("127.0.0.1", rd.port), timeout=5)
    mon.sendall(resp_encode("MONITOR"))
    f = mon.makefile("rb")
    assert f.readline().strip() == b"+OK"
    for i in range(12):
        p.get("/r/%d" % i, key=key)
        p.request("POST", "/w", key=key, body=b"x")
    time.sleep(0.5)
    mon.settimeout(0.5)
    seen = []
    try:
        while True:
            ln = f.readline()
            if not ln:
                break
            seen.append(ln.decode(errors="replace"))
    except (socket.timeout, OSError):
        pass
    mon.close()
    assert seen, "MONITOR saw no commands at all"
    # a MONITOR line: 1700000000.000000 [0 127.0.0.1:41234] "EVALSHA" "..." (or [0 lua])
    cmds = [m.group(1).upper() for m in (re.search(r'\] "([^"]+)"', ln) for ln in seen) if m]
    assert cmds, seen[:5]
    walks = [c for c in cmds if c in ("KEYS", "SCAN", "HSCAN", "SSCAN", "ZSCAN")]
    assert walks == [], walks


def evalsha_calls(rd):
    info = rd.cmd("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    m = re.search(r"cmdstat_evalsha:calls=(\d+)", text)
    return int(m.group(1)) if m else 0


def test_repeat_rejections_cost_no_store_call(catalog, proxies, redis_factory):
    """A client over a rate limit keeps getting 429 until the reset, but only its first
    rejection asks Redis: the rest are answered from the proxy's memory of it, with the
    same numbers, until the reset."""
    catalog.plan("tiny", "--rate", "1/min")
    _, key = catalog.user_key("tiny")
    _, other = catalog.user_key("tiny")
    rd = redis_factory()
    # one worker: each worker remembers its own rejections
    p = proxies.start(catalog, store="redis", redis=rd, proxy={"workers": 1})
    before = evalsha_calls(rd)
    statuses, resets = [], []
    for _ in range(20):
        r = p.get("/x", key=key)
        statuses.append(r.status)
        if r.status == 429:
            state = ietf_state(r)["tiny-1min"]
            resets.append(state["t"])
            assert r.json()["error_code"] == "rate_limit_exceeded"
            assert state["r"] == 0
    assert statuses == [200] + [429] * 19
    assert all(55 <= s <= 60 for s in resets), resets
    assert evalsha_calls(rd) - before == 2   # the allowed request and the first rejection
    # another user of the same plan is decided by Redis as usual
    assert p.get("/x", key=other).status == 200
    assert evalsha_calls(rd) - before == 3
