"""What an operator sees: --check, configuration errors naming file, line and key, and the
precedence file < TIERPROXY_<SECTION>_<KEY> < command-line flag."""
import subprocess

import pytest

from conftest import (TIERPROXY_BIN, _clean_env, free_port, port_open, wait_until,
                      write_ini)


def run_check(ini_path, env=None, extra=()):
    cp = subprocess.run([TIERPROXY_BIN, "-c", str(ini_path), "--check"] + list(extra),
                        capture_output=True, text=True, timeout=60, env=_clean_env(env),
                        stdin=subprocess.DEVNULL)
    return cp, cp.stdout + cp.stderr


def config_with(proxies, catalog, tmp_path, name, edit=None):
    ini = proxies.config(catalog, store="memory")
    if edit:
        edit(ini)
    path = tmp_path / name
    write_ini(path, ini)
    return path


def line_of(path, text):
    for i, ln in enumerate(path.read_text().splitlines(), 1):
        if ln.startswith(text):
            return i
    raise AssertionError("%r not in %s" % (text, path))


def test_check_good_config_exits_0(proxies, catalog, tmp_path):
    path = config_with(proxies, catalog, tmp_path, "good.ini")
    cp, out = run_check(path)
    assert cp.returncode == 0, out


def test_check_example_config(catalog, tmp_path):
    # the shipped example configuration is valid (with a catalog that exists)
    import pathlib
    example = pathlib.Path(__file__).resolve().parents[2] / "etc" / "tierproxy.ini"
    if not example.exists():
        pytest.skip("etc/tierproxy.ini not written yet")
    cp, out = run_check(example, extra=["--db", str(catalog.path)])
    assert cp.returncode == 0, out


@pytest.mark.parametrize("section,key,value", [
    ("proxy", "bogus_key", "1"),
    ("limits", "stroe", "memory"),           # a typo of a real key
    ("nonsense", "x", "1"),                  # a whole unknown section
])
def test_check_unknown_key_names_file_line_key(proxies, catalog, tmp_path, section, key, value):
    def edit(ini):
        ini.setdefault(section, {})[key] = value
    path = config_with(proxies, catalog, tmp_path, "unknown.ini", edit)
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    assert str(path) in out or path.name in out, out
    assert str(line_of(path, key + " =")) in out, out
    assert key in out, out


@pytest.mark.parametrize("section,key,value", [
    ("proxy", "workers", "lots"),
    ("proxy", "listen", "127.0.0.1:99999"),
    ("proxy", "max_body_bytes", "-5"),
    ("limits", "store", "postgres"),
    ("limits", "headers", "fancy"),
    ("limits", "on_store_error", "maybe"),
    ("auth", "forward_key", "perhaps"),
    ("proxy", "trusted_proxies", "10.0.0.0/33"),
])
def test_check_bad_value_names_file_line_key(proxies, catalog, tmp_path, section, key, value):
    def edit(ini):
        ini[section][key] = value
    path = config_with(proxies, catalog, tmp_path, "badvalue.ini", edit)
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    assert str(path) in out or path.name in out, out
    assert str(line_of(path, key + " =")) in out, out
    assert key in out, out


def test_check_missing_catalog_fails(proxies, catalog, tmp_path):
    def edit(ini):
        ini["plans"]["db"] = str(tmp_path / "no-such-dir" / "plans.db")
    path = config_with(proxies, catalog, tmp_path, "nocatalog.ini", edit)
    cp, out = run_check(path)
    assert cp.returncode == 1, out


def test_version_and_help():
    cp = subprocess.run([TIERPROXY_BIN, "--version"], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and cp.stdout.strip(), cp
    cp = subprocess.run([TIERPROXY_BIN, "--help"], capture_output=True, text=True, timeout=30)
    assert cp.returncode == 0 and "--listen" in cp.stdout + cp.stderr, cp


def test_env_overrides_file_and_flag_overrides_both(proxies, catalog, tmp_path):
    # SPEC "Day two": a command-line flag overrides an environment variable, which
    # overrides the file (test_day2_config.py holds it for upstream and db too)
    _, key = catalog.user_key("free")
    ini = proxies.config(catalog, store="memory")
    file_port = int(ini["proxy"]["listen"].rsplit(":", 1)[1])
    flag_port, env_port = free_port(), free_port()
    # the environment wins over the file
    p = proxies.start_ini(ini, env={"TIERPROXY_PROXY_LISTEN": "127.0.0.1:%d" % env_port}, wait=False)
    p.port = env_port
    p.wait_ready()
    assert p.get("/x", key=key).status == 200
    assert not port_open(file_port)
    problems = p.stop()
    assert not problems, problems
    # the flag wins over both
    ini = proxies.config(catalog, store="memory")
    file_port = int(ini["proxy"]["listen"].rsplit(":", 1)[1])
    p = proxies.start_ini(ini, args=["--listen", "127.0.0.1:%d" % flag_port],
                          env={"TIERPROXY_PROXY_LISTEN": "127.0.0.1:%d" % env_port}, wait=False)
    p.port = flag_port
    p.wait_ready()
    assert p.get("/x", key=key).status == 200
    assert not port_open(file_port) and not port_open(env_port)


def test_env_bad_value_fails_check(proxies, catalog, tmp_path):
    path = config_with(proxies, catalog, tmp_path, "good.ini")
    cp, out = run_check(path, env={"TIERPROXY_LIMITS_HEADERS": "fancy"})
    assert cp.returncode == 1, out
    assert "TIERPROXY_LIMITS_HEADERS" in out or "headers" in out, out
