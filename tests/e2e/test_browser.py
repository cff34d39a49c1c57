"""A real browser through the proxy (SPEC "Clients as they are", Browser WebSockets):
Debian's chromium, headless, driven over the DevTools protocol (python3-websocket), loads a
page served through the proxy (by ws_upstream.py) and opens WebSockets from page script,
which cannot set Authorization: authenticated by the key_query parameter and by the
`tierproxy.key.KEY` subprotocol, exchanging text and 1 MiB binary messages with
permessage-deflate negotiated; with ws_refusal = close it sees 4401 and 4429 (and their
reasons) instead of a bare 1006, and 1008 past a --ws-messages limit. The key reaches no
upstream request and no log line."""
import json
import os
import pathlib
import re
import signal
import subprocess
import urllib.request

import pytest

from conftest import SLOW, require_program, wait_until
from fleet_helpers import ws_upstream  # noqa: F401

try:
    import websocket  # python3-websocket (etc/setup.sh)
except ImportError:
    websocket = None


class Chromium:
    """A headless chromium with its own profile, and one page driven over DevTools."""

    def __init__(self, tmpdir):
        exe = require_program("chromium", "chromium")
        if websocket is None:
            pytest.fail("python3-websocket is not installed (etc/setup.sh installs it)", pytrace=False)
        self.profile = pathlib.Path(tmpdir) / "chromium-profile"
        self.profile.mkdir()
        self.log = open(pathlib.Path(tmpdir) / "chromium.log", "wb")
        # --no-sandbox: the suite runs as root; the sandbox is the browser's, not under test.
        # --disable-dev-shm-usage: a chroot or container may have a small or no /dev/shm.
        self.proc = subprocess.Popen(
            [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--disable-dev-shm-usage",
             "--remote-debugging-port=0", "--remote-allow-origins=*",
             "--user-data-dir=%s" % self.profile, "about:blank"],
            stdout=subprocess.DEVNULL, stderr=self.log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.ws = None
        self.next_id = 0
        port_file = self.profile / "DevToolsActivePort"
        if not wait_until(lambda: port_file.exists() and port_file.read_text().strip(), 30 * SLOW):
            raise AssertionError("chromium did not open its DevTools port:\n%s" % self.log_text())
        port = int(port_file.read_text().split()[0])
        pages = []

        def page_listed():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=5) as r:
                    pages[:] = [t for t in json.load(r) if t.get("type") == "page"]
            except OSError:
                return False
            return pages
        assert wait_until(page_listed, 10 * SLOW), "chromium shows no page target"
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=60 * SLOW,
                                              suppress_origin=True)

    def log_text(self):
        self.log.flush()
        return (pathlib.Path(self.log.name).read_text(errors="replace"))[-3000:]

    def call(self, method, **params):
        """One DevTools command; returns its result (events in between are skipped)."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def evaluate(self, expression):
        """The value of expression (a promise is awaited) in the page."""
        res = self.call("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in res:
            raise AssertionError("page script failed: %s" % json.dumps(res["exceptionDetails"])[:2000])
        return res["result"].get("value")

    def open(self, url):
        self.call("Page.navigate", url=url)

        def loaded():
            try:
                return self.evaluate("window.pageReady === true && location.href") == url
            except AssertionError:  # the old page's context went away under the call
                return False
        assert wait_until(loaded, 20 * SLOW), \
            "the page did not load: %s" % self.evaluate("document.body && document.body.innerText")

    def close(self):
        if self.ws is not None:
            self.ws.close()
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


@pytest.fixture
def browser(tmp_path):
    b = Chromium(tmp_path)
    yield b
    b.close()


def test_browser_websockets_through_the_proxy(catalog, proxies, ws_upstream, browser):
    catalog.plan("page", "--rate", "100000/min")
    user, key = catalog.user_key("page")
    catalog.plan("once", "--rate", "1/min")
    _, once_key = catalog.user_key("once")
    catalog.plan("chatty", "--rate", "100000/min", "--ws-messages", "3/min")
    _, chatty_key = catalog.user_key("chatty")
    p = proxies.start(catalog, upstream=ws_upstream, store="memory",
                      auth={"key_query": "api_key", "ws_refusal": "close"})

    # the page itself comes through the proxy, authenticated by the query parameter
    browser.open("%s/page/browser_page.html?api_key=%s" % (p.url, key))

    def exchange(path, protocols):
        got = browser.evaluate("exchange(%s, %s)" % (json.dumps(path), json.dumps(protocols)))
        assert got["text"] == "hello from the page", got
        assert got["binaryLength"] == 1 << 20 and got["binaryEqual"], got
        assert "permessage-deflate" in got["extensions"], got
        assert got["close"]["code"] == 1000, got
        return got

    # the key in the query
    got = exchange("/ws/deflate?api_key=" + key, [])
    assert got["protocol"] == "", got
    # the key as a subprotocol; the upstream selects none, so the proxy selects "tierproxy"
    got = exchange("/ws/deflate", ["tierproxy", "tierproxy.key." + key])
    assert got["protocol"] == "tierproxy", got

    # refusals page script can tell apart
    got = browser.evaluate('refusal("/ws", ["tierproxy"])')
    assert (got["code"], got["reason"]) == (4401, "missing_api_key"), got
    exchange("/ws/deflate?api_key=" + once_key, [])
    got = browser.evaluate('refusal("/ws/deflate?api_key=%s", [])' % once_key)
    assert got["code"] == 4429 and re.fullmatch(r"retry after \d+", got["reason"]), got
    # past the message limit
    got = browser.evaluate('pastLimit("/ws", ["tierproxy", "tierproxy.key.%s"], 6)' % chatty_key)
    assert got["code"] == 1008, got

    # the key reached no upstream request and no log line
    seen = json.dumps(ws_upstream.stats()["requests"])
    assert any(r["target"] == "/page/browser_page.html" for r in ws_upstream.stats()["requests"]), seen[:2000]
    log = open(p.access_log).read()
    for k in (key, once_key, chatty_key):
        assert k not in seen, "a key reached the upstream: %s" % seen[:3000]
        assert k not in p.stderr(), "a key is in the proxy's stderr"
        assert k not in log, "a key is in the access log:\n%s" % log[-3000:]
