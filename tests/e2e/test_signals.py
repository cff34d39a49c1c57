"""SIGTERM lets in-flight requests finish and exits 0; SIGHUP reloads the file."""
import signal
import threading
import time

from conftest import wait_until, write_ini


def test_sigterm_finishes_in_flight_and_exits_0(catalog, start_proxy):
    _, key = catalog.user_key("free")
    p = start_proxy(catalog)
    result = {}

    def slow():
        result["r"] = p.get("/slow/1500", key=key, timeout=30)
    t = threading.Thread(target=slow)
    t.start()
    time.sleep(0.5)
    p.signal(signal.SIGTERM)
    t.join(30)
    assert "r" in result and result["r"].status == 200, result
    assert result["r"].echo["path"] == "/slow/1500"
    p.proc.wait(15)
    assert p.proc.returncode == 0, p.stderr()[-2000:]


def test_sigint_exits_0(catalog, start_proxy):
    p = start_proxy(catalog)
    p.signal(signal.SIGINT)
    p.proc.wait(15)
    assert p.proc.returncode == 0, p.stderr()[-2000:]


def test_sighup_reloads_configuration(catalog, start_proxy):
    catalog.plan("five", "--rate", "5/min")
    _, key = catalog.user_key("five")
    p = start_proxy(catalog, limits={"headers": "draft"})
    assert p.get("/x", key=key).header("RateLimit-Limit") == "5"
    p.ini["limits"]["headers"] = "x"
    write_ini(p.ini_path, p.ini)
    p.signal(signal.SIGHUP)
    ok = wait_until(lambda: p.get("/x", key=key).header("X-RateLimit-Limit") == "5", 5,
                    interval=0.2)
    assert ok, "SIGHUP did not switch headers to x"
    assert p.proc.poll() is None
