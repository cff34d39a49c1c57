"""Installing (SPEC, "Additions of 2026-11-28", "Day two"): `meson install` puts tierproxy and
tierctl, the man pages tierproxy(8) and tierctl(1), the example configuration as
/etc/tierproxy/tierproxy.ini (never over one that is there), the systemd unit and the
logrotate file in their places; etc/package.sh builds a Debian package holding them that
depends on the libraries the programs link.

The build under test is the meson build directory that holds TIERPROXY_BIN
(build/proxy/tierproxy -> build/), or TIERPROXY_BUILD_DIR. `meson install --destdir` puts it
in the test's temporary directory: nothing on the host changes. The package test runs
etc/package.sh as it is, in its own build directory build-deb/ (a release build, the same
whatever build is under test), so that only the first run compiles everything (package.sh
locks it, should two runs meet there).
"""
import configparser
import json
import os
import pathlib
import re
import subprocess

import pytest

import conftest

# What is installed and packaged is the same whatever the sanitizer: the plain run checks it,
# and the sanitizer run, the longer of the two, keeps its time for the programs' behaviour.
pytestmark = pytest.mark.skipif(conftest.SANITIZED, reason="packaging: checked by the plain run")

ROOT = conftest.ROOT
ETC_FILES = ("etc/tierproxy/tierproxy.ini", "etc/logrotate.d/tierproxy")
# Every command of tierctl (SPEC and its additions), each to be found in tierctl(1).
TIERCTL_COMMANDS = ("init", "plan add", "plan set", "plan list", "plan show", "plan remove",
                    "limit add", "limit set", "limit remove", "cost set", "cost remove",
                    "user add", "user set", "user list", "user show", "user remove",
                    "user limit add", "user limit remove", "usage", "key create", "key list",
                    "key revoke", "export", "backup", "import", "publish", "pull", "status",
                    "simulate")
TIERCTL_FLAGS = ("--db", "--config", "--help", "--version", "--json", "--rate", "--burst",
                 "--algorithm", "--concurrency", "--ws-messages", "--quota", "--shadow",
                 "--priority", "--route", "--plan", "--label", "--force", "--redis",
                 "--key-prefix")
TIERPROXY_FLAGS = ("-c", "--listen", "--upstream", "--db", "--redis", "--admin", "--check",
                   "--version", "--help")


def build_dir():
    """The meson build directory under test."""
    explicit = os.environ.get("TIERPROXY_BUILD_DIR")
    d = pathlib.Path(explicit) if explicit else \
        pathlib.Path(conftest.REAL_TIERPROXY_BIN).resolve().parents[1]
    if not (d / "meson-private").is_dir():
        pytest.fail("%s is not a meson build directory (TIERPROXY_BIN=%s); set "
                    "TIERPROXY_BUILD_DIR" % (d, conftest.REAL_TIERPROXY_BIN), pytrace=False)
    return d


def build_options(build):
    meson = conftest.require_program("meson", "meson")
    out = subprocess.run([meson, "introspect", "--buildoptions", str(build)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return {o["name"]: o["value"] for o in json.loads(out)}


def systemd_unit_dir(options, prefix):
    """Where the unit belongs: the build's systemdsystemunitdir option when given, else
    systemd's pkg-config variable, else PREFIX/lib/systemd/system."""
    given = options.get("systemdsystemunitdir") or ""
    if given:
        return given
    cp = subprocess.run(["pkg-config", "--variable=systemdsystemunitdir", "systemd"],
                        capture_output=True, text=True, timeout=30)
    return cp.stdout.strip() if cp.returncode == 0 and cp.stdout.strip() else \
        os.path.join(prefix, "lib/systemd/system")


def meson_install(build, destdir):
    meson = conftest.require_program("meson", "meson")
    cp = subprocess.run([meson, "install", "-C", str(build), "--destdir", str(destdir),
                         "--no-rebuild"], capture_output=True, text=True, timeout=300,
                        stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, "meson install exited %d:\n%s%s" % (cp.returncode, cp.stdout,
                                                                   cp.stderr)
    return cp


def under(root, path):
    return pathlib.Path(str(root) + "/" + str(path).lstrip("/"))


def listing(root):
    return sorted("/" + str(p.relative_to(root)) for p in pathlib.Path(root).rglob("*")
                  if not p.is_dir())


class Layout:
    """Where each installed file belongs, for a build's options."""

    def __init__(self, options):
        prefix = options["prefix"]
        join = lambda d, *rest: os.path.join(prefix, d, *rest)     # noqa: E731
        self.tierproxy = join(options["bindir"], "tierproxy")
        self.tierctl = join(options["bindir"], "tierctl")
        self.mandir = join(options["mandir"])
        self.man_tierproxy = join(options["mandir"], "man8", "tierproxy.8")
        self.man_tierctl = join(options["mandir"], "man1", "tierctl.1")
        self.config = "/etc/tierproxy/tierproxy.ini"
        self.unit = os.path.join(systemd_unit_dir(options, prefix), "tierproxy.service")
        self.logrotate = "/etc/logrotate.d/tierproxy"

    def files(self):
        return [self.tierproxy, self.tierctl, self.man_tierproxy, self.man_tierctl,
                self.config, self.unit, self.logrotate]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """One `meson install --destdir` of the build under test: (destdir, Layout)."""
    build = build_dir()
    dest = tmp_path_factory.mktemp("destdir")
    meson_install(build, dest)
    return dest, Layout(build_options(build))


def read_unit(path):
    """[(section, key, value)] of a systemd unit file."""
    entries, section = [], None
    for line in pathlib.Path(path).read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line:
            k, _, v = line.partition("=")
            entries.append((section, k.strip(), v.strip()))
    return entries


def unit_values(unit, section, key):
    return [v for s, k, v in unit if s == section and k == key]


def read_ini(path):
    ini = configparser.ConfigParser(inline_comment_prefixes=(";", "#"), interpolation=None)
    ini.read(path)
    return ini


def render_man(page, env_extra=None):
    """`man -l PAGE` as plain text, no hyphenation, wide lines: (text, stderr, rc)."""
    man = conftest.require_program("man", "man-db")
    assert pathlib.Path(page).is_file(), "no man page %s" % page
    env = dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="200", LC_ALL="C.UTF-8",
               MANROFFOPT="-rHY=0")
    env.update(env_extra or {})
    cp = subprocess.run([man, "--warnings", "-l", str(page)], capture_output=True, text=True,
                        timeout=60, env=env, stdin=subprocess.DEVNULL)
    return cp.stdout, cp.stderr, cp.returncode


# --------------------------------------------------------------------------------------
# meson install

def test_meson_install_puts_every_file_in_its_place(installed):
    dest, layout = installed
    missing = [f for f in layout.files() if not under(dest, f).is_file()]
    assert not missing, "meson install put nothing at %s; it installed:\n  %s" % (
        ", ".join(missing), "\n  ".join(listing(dest)))
    for program in (layout.tierproxy, layout.tierctl):
        assert os.access(under(dest, program), os.X_OK), program
    # the installed programs are the ones built: they answer --version
    for program in (layout.tierproxy, layout.tierctl):
        cp = subprocess.run([str(under(dest, program)), "--version"], capture_output=True,
                            text=True, timeout=30)
        assert cp.returncode == 0 and cp.stdout.strip(), (program, cp)


def test_installed_unit_runs_the_installed_program_and_names_its_pages(installed):
    dest, layout = installed
    unit = read_unit(under(dest, layout.unit))
    svc = lambda key: unit_values(unit, "Service", key)     # noqa: E731
    exec_start = (svc("ExecStart") or [""])[-1].split()
    assert exec_start and exec_start[0] == layout.tierproxy, \
        "ExecStart=%s does not run the installed %s" % (" ".join(exec_start), layout.tierproxy)
    docs = " ".join(unit_values(unit, "Unit", "Documentation")).split()
    assert "man:tierproxy(8)" in docs and "man:tierctl(1)" in docs, \
        "Documentation=%s names not the installed man pages" % " ".join(docs)
    assert svc("StateDirectory") == ["tierproxy"], svc("StateDirectory")
    # logrotate rotates /var/log/tierproxy/: the service must have that directory
    assert svc("LogsDirectory") == ["tierproxy"], \
        "no LogsDirectory=tierproxy; the logrotate file expects /var/log/tierproxy/"
    logrotate = under(dest, layout.logrotate).read_text()
    assert re.search(r"(?m)^/var/log/tierproxy/\S+\s*\{", logrotate), logrotate


def test_installed_configuration_names_the_service_directories(installed, tmp_path):
    """The installed file works as it is under the unit: the catalog in the state directory
    (where a following proxy writes its cache too), the access log where logrotate looks."""
    dest, layout = installed
    ini = read_ini(under(dest, layout.config))
    assert ini.get("plans", "db").startswith("/var/lib/tierproxy/"), ini.get("plans", "db")
    assert ini.get("log", "access").startswith("/var/log/tierproxy/"), ini.get("log", "access")
    # and it is a configuration tierproxy accepts (its two paths pointed here)
    catalog = conftest.Catalog(tmp_path / "plans.db").init()
    env = dict(conftest._clean_env(), TIERPROXY_LOG_ACCESS=str(tmp_path / "access.log"))
    cp = subprocess.run([conftest.TIERPROXY_BIN, "-c", str(under(dest, layout.config)),
                         "--db", str(catalog.path), "--check"], capture_output=True,
                        text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)
    assert cp.returncode == 0, "tierproxy --check of the installed file: exit %d\n%s" % (
        cp.returncode, cp.stderr)


def test_installed_unit_passes_systemd_analyze_verify(installed, tmp_path):
    """The unit as installed, its man pages found where meson install put them (MANPATH).
    Its ExecStart is the installed program under the destdir (systemd-analyze --root would
    look for the units and programs systemd needs there too)."""
    dest, layout = installed
    analyze = conftest.require_program("systemd-analyze", "systemd")
    text = under(dest, layout.unit).read_text()
    copy, n = re.subn(r"(?m)^(ExecStart=[-@:+!]*)%s(?=\s)" % re.escape(layout.tierproxy),
                      lambda m: m.group(1) + str(under(dest, layout.tierproxy)), text)
    assert n == 1, "no ExecStart=%s in the installed unit" % layout.tierproxy
    (tmp_path / "tierproxy.service").write_text(copy)
    env = dict(conftest._clean_env(), MANPATH=str(under(dest, layout.mandir)))
    cp = subprocess.run([analyze, "verify", str(tmp_path / "tierproxy.service")],
                        capture_output=True, text=True, timeout=60, env=env,
                        stdin=subprocess.DEVNULL, cwd=str(tmp_path))
    out = (cp.stdout + cp.stderr).strip()
    assert cp.returncode == 0 and out == "", \
        "systemd-analyze verify of the installed unit (exit %d):\n%s" % (cp.returncode, out)


def test_man_pages_render_and_man_finds_them(installed):
    dest, layout = installed
    mandir = under(dest, layout.mandir)
    man = conftest.require_program("man", "man-db")
    for name, section, path in (("tierproxy", "8", layout.man_tierproxy),
                                ("tierctl", "1", layout.man_tierctl)):
        text, err, rc = render_man(under(dest, path))
        assert rc == 0 and err.strip() == "", "man -l %s: exit %d\n%s" % (path, rc, err)
        for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "SEE ALSO"):
            assert re.search(r"(?m)^%s$" % heading, text), (path, heading, text[:600])
        cp = subprocess.run([man, "-w", section, name], capture_output=True, text=True,
                            timeout=30, env=dict(os.environ, MANPATH=str(mandir)))
        assert cp.returncode == 0 and cp.stdout.strip() == str(under(dest, path)), \
            "man -w %s %s: %r %r" % (section, name, cp.stdout, cp.stderr)


def test_tierctl_page_covers_every_command_and_the_fleet(installed):
    dest, layout = installed
    text, _, _ = render_man(under(dest, layout.man_tierctl))
    flat = " ".join(text.split())
    missing = [c for c in TIERCTL_COMMANDS if not re.search(r"(?<![\w-])%s\b" % c, flat)]
    missing += [f for f in TIERCTL_FLAGS if not re.search(r"(?<![\w-])%s\b" % f, flat)]
    missing += [w for w in ("TIERPROXY_PLANS_DB", "TIERPROXY_CONFIG",
                            "/etc/tierproxy/tierproxy.ini", "follow = redis", "rediss://")
                if w not in flat]
    assert not missing, "tierctl(1) does not mention: %s" % ", ".join(missing)


def test_tierproxy_page_covers_every_key_of_the_example_file(installed):
    """Each key of etc/tierproxy.ini, each flag, /health's answers and the signals."""
    dest, layout = installed
    text, _, _ = render_man(under(dest, layout.man_tierproxy))
    flat = " ".join(text.split())
    example = read_ini(ROOT / "etc" / "tierproxy.ini")
    missing = ["[%s] %s" % (s, k) for s in example.sections() for k in example[s]
               if not re.search(r"(?<![\w-])%s\b" % re.escape(k), flat)]
    missing += ["[%s]" % s for s in example.sections() if "[%s]" % s not in flat]
    missing += [f for f in TIERPROXY_FLAGS if not re.search(r"(?<![\w-])%s\b" % f, flat)]
    missing += [w for w in ("/health", "/metrics", "degraded", "rediss://", "redis_ca_file",
                            "TIERPROXY_PLANS_DB", "SIGHUP", "SIGUSR1", "SIGTERM",
                            "/etc/tierproxy/tierproxy.ini", "/var/lib/tierproxy",
                            "/var/log/tierproxy") if w not in flat]
    assert not missing, "tierproxy(8) does not mention: %s" % ", ".join(missing)


def test_second_install_keeps_a_changed_configuration(tmp_path):
    build = build_dir()
    dest = tmp_path / "dest"
    meson_install(build, dest)
    edited = {}
    for rel in ETC_FILES:
        path = dest / rel
        assert path.is_file(), "meson install put nothing at /%s" % rel
        edited[rel] = path.read_text() + "; changed by the operator\n"
        path.write_text(edited[rel])
    meson_install(build, dest)
    for rel in ETC_FILES:
        assert (dest / rel).read_text() == edited[rel], \
            "a second meson install overwrote the operator's /%s" % rel


# --------------------------------------------------------------------------------------
# etc/package.sh

def dpkg_deb(*args):
    return subprocess.run(["dpkg-deb"] + list(args), check=True, capture_output=True,
                          text=True, timeout=120).stdout


def needed_packages(binary):
    """The Debian packages of the shared libraries binary names (DT_NEEDED) on this host."""
    readelf = conftest.require_program("readelf", "binutils")
    dyn = subprocess.run([readelf, "-d", str(binary)], check=True, capture_output=True,
                         text=True).stdout
    sonames = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dyn)
    ldd = subprocess.run(["ldd", str(binary)], check=True, capture_output=True,
                         text=True).stdout
    paths = dict(re.findall(r"^\s*(\S+) => (\S+)", ldd, re.M))
    packages = {}
    for soname in sonames:
        path = paths.get(soname)
        assert path, "%s: %s not resolved by ldd:\n%s" % (binary, soname, ldd)
        owner = None
        for candidate in (path, os.path.realpath(path),
                          re.sub(r"^/usr/lib/", "/lib/", path),
                          re.sub(r"^/lib/", "/usr/lib/", path)):
            cp = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
            if cp.returncode == 0:
                owner = cp.stdout.split(":")[0]
                break
        assert owner, "no package owns %s (%s)" % (path, soname)
        packages[soname] = owner
    return packages


def test_package_holds_every_file_and_depends_on_what_it_links(tmp_path):
    conftest.require_program("dpkg-deb", "dpkg")
    conftest.require_program("dpkg-shlibdeps", "dpkg-dev")
    out = tmp_path / "out"
    assert (ROOT / "etc" / "package.sh").is_file(), "no etc/package.sh"
    cp = subprocess.run([str(ROOT / "etc" / "package.sh"), "--builddir",
                         str(ROOT / "build-deb"), "--output", str(out)],
                        capture_output=True, text=True, timeout=1200,
                        stdin=subprocess.DEVNULL, cwd=str(ROOT))
    assert cp.returncode == 0, "etc/package.sh exited %d:\n%s\n%s" % (
        cp.returncode, cp.stdout[-3000:], cp.stderr[-3000:])
    debs = sorted(out.glob("*.deb"))
    assert len(debs) == 1, "etc/package.sh made %s in %s" % ([d.name for d in debs], out)
    deb = debs[0]

    contents = dpkg_deb("-c", str(deb))
    names = {line.split()[-1].lstrip(".") for line in contents.splitlines()
             if not line.startswith("d")}
    unit_dir = "/lib/systemd/system"        # where Debian 12's packages put their units
    expected = ["/usr/bin/tierproxy", "/usr/bin/tierctl", "/usr/share/man/man8/tierproxy.8.gz",
                "/usr/share/man/man1/tierctl.1.gz", "/etc/tierproxy/tierproxy.ini",
                unit_dir + "/tierproxy.service", "/etc/logrotate.d/tierproxy"]
    missing = [f for f in expected if f not in names]
    assert not missing, "the package lacks %s; dpkg-deb -c:\n%s" % (missing, contents)
    assert all(" root/root " in line for line in contents.splitlines()), contents

    fields = dict(re.findall(r"(?m)^([A-Za-z-]+): (.*)$",
                             dpkg_deb("-f", str(deb), "Package", "Version", "Architecture",
                                      "Depends", "Maintainer", "Description")))
    assert fields.get("Package") == "tierproxy", fields
    depends = {re.split(r"[\s(]", d.strip())[0]
               for d in fields.get("Depends", "").replace("|", ",").split(",") if d.strip()}
    root = tmp_path / "root"
    dpkg_deb("-x", str(deb), str(root))
    unlisted = {}
    for program in ("usr/bin/tierproxy", "usr/bin/tierctl"):
        for soname, package in needed_packages(root / program).items():
            if package.split(":")[0] not in depends:
                unlisted[soname] = package
    assert not unlisted, "Depends: %s\nlacks the packages of linked libraries: %s" % (
        fields.get("Depends"), unlisted)

    control = tmp_path / "control"
    dpkg_deb("-e", str(deb), str(control))
    conffiles = (control / "conffiles").read_text().split() \
        if (control / "conffiles").exists() else []
    assert sorted(conffiles) == sorted("/" + f for f in ETC_FILES), \
        "conffiles (kept over upgrades when edited): %s" % conffiles
    for script in ("postinst", "prerm", "postrm"):
        path = control / script
        assert path.is_file() and os.access(path, os.X_OK), "no executable %s" % script
        syntax = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True)
        assert syntax.returncode == 0, (script, syntax.stderr)
    exec_start = [v for s, k, v in read_unit(root / unit_dir.lstrip("/") / "tierproxy.service")
                  if k == "ExecStart"]
    assert exec_start and exec_start[-1].split()[0] == "/usr/bin/tierproxy", exec_start
