"""A Redis connection that breaks while tierctl or `tierproxy --check` writes to it.

The kernel answers a write to a connection its peer has reset with SIGPIPE, whose default
kills the process without a word. Redis resets connections on its own: it drops an
unauthenticated client that sends a command longer than 16 KiB (the check script's SCRIPT
LOAD after a wrong password, over TLS written record by record), a client over its output
limit, every client on a restart. The command must say what failed and exit 1.

When the reset comes is a race, so these tests send the SIGPIPE themselves while the command
waits on a Redis that accepts and never answers; test_day2_tls.py's wrong-password case meets
the real one."""
import os
import re
import signal
import socket
import subprocess
import threading

import pytest

from conftest import SLOW, TIERCTL_BIN, TIERPROXY_BIN, _clean_env, write_ini


class SilentRedis:
    """A TCP listener that accepts connections, reads what comes and never answers."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.url = "redis://127.0.0.1:%d/0" % self.port
        self.accepted = threading.Event()
        self.conns = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()
            threading.Thread(target=self._drain, args=(conn,), daemon=True).start()

    @staticmethod
    def _drain(conn):
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass

    def close(self):
        self.listener.close()
        for c in self.conns:
            c.close()


@pytest.fixture
def silent_redis():
    s = SilentRedis()
    yield s
    s.close()


def pipe_during_the_conversation(cmd, server):
    """Runs cmd, sends it SIGPIPE once it is connected to server; returns (rc, stderr)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_clean_env(),
                            stdin=subprocess.DEVNULL)
    try:
        assert server.accepted.wait(20 * SLOW), "%s never connected to its Redis" % cmd
        os.kill(proc.pid, signal.SIGPIPE)
        _, err = proc.communicate(timeout=60 * SLOW)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.fixture
def redis_ini(catalog, proxies, silent_redis, tmp_path):
    path = tmp_path / "silent.ini"
    ini = proxies.config(catalog, store="redis", redis=silent_redis, plans={"db": str(catalog.path),
                                                                            "follow": "redis"})
    write_ini(path, ini)
    return path


def tierctl(catalog, *args):
    return [TIERCTL_BIN, "--db", str(catalog.path)] + [str(a) for a in args]


@pytest.mark.parametrize("command", ["usage", "status", "publish", "pull", "a change"])
def test_tierctl_says_a_broken_redis_connection(catalog, silent_redis, redis_ini, command):
    user, _ = catalog.user_key("free")
    args = {
        "usage": ("usage", user, "--config", redis_ini),
        "status": ("--config", redis_ini, "status"),
        "publish": ("--config", redis_ini, "publish"),
        "pull": ("--config", redis_ini, "pull"),
        "a change": ("plan", "add", "gold", "--rate", "9/min", "--config", redis_ini),
    }[command]
    rc, err = pipe_during_the_conversation(tierctl(catalog, *args), silent_redis)
    assert rc == 1, (rc, err)
    assert "127.0.0.1:%d" % silent_redis.port in err, err
    if command == "a change":   # made locally, said unpublished
        assert "gold" in catalog.run("plan", "list").stdout


def test_check_says_a_broken_redis_connection(silent_redis, redis_ini):
    """A Redis that does not answer is a warning to --check (the proxy starts and decides by
    on_store_error until it answers)."""
    rc, err = pipe_during_the_conversation([TIERPROXY_BIN, "-c", str(redis_ini), "--check"], silent_redis)
    assert rc == 0, (rc, err)
    assert re.search(r'"level":"warn".*\[limits\] redis: .*127\.0\.0\.1:%d' % silent_redis.port, err), err


def test_tierctl_output_to_a_closed_pipe_still_ends_it_quietly(catalog):
    """Outside a Redis conversation SIGPIPE keeps its default: `tierctl key list | head -1`
    ends tierctl without an error message, as it ends any Unix filter."""
    for _ in range(3):
        catalog.user_key("free")
    proc = subprocess.Popen(tierctl(catalog, "key", "list"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_clean_env(), stdin=subprocess.DEVNULL)
    proc.stdout.close()
    _, err = proc.communicate(timeout=30 * SLOW)
    assert proc.returncode in (0, -signal.SIGPIPE), (proc.returncode, err)
    assert err == b"", err
