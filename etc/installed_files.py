#!/usr/bin/env python3
"""The installed variants of two files of etc/, written at build time (etc/meson.build):

  installed_files.py unit IN OUT BINDIR   the systemd unit, its ExecStart running BINDIR/tierproxy
  installed_files.py ini IN OUT           the example configuration as /etc/tierproxy/tierproxy.ini:
                                          [plans] db and [log] access in the service's state and
                                          log directories, every other value as in IN

Each fails, saying what it missed, when IN no longer has the line it rewrites, so that a
change to the example cannot silently leave the installed file without it.
"""
import re
import sys

STATE_DIR = "/var/lib/tierproxy"
LOGS_DIR = "/var/log/tierproxy"
INSTALLED_VALUES = (("plans", "db", STATE_DIR + "/plans.db"),
                    ("log", "access", LOGS_DIR + "/access.log"))
INI_NOTE = """\
; Installed as /etc/tierproxy/tierproxy.ini, the file tierproxy.service runs tierproxy -c
; on (man tierproxy). Here [plans] db and [log] access name the service's state and log
; directories, %s and %s; every other value is the
; built-in default, as in the example below.
;
""" % (STATE_DIR, LOGS_DIR)


def fail(message):
    sys.exit("installed_files.py: " + message)


def installed_unit(text, bindir):
    text, n = re.subn(r"(?m)^(ExecStart=[-@:+!]*)\S*/tierproxy(?=\s)",
                      lambda m: m.group(1) + bindir.rstrip("/") + "/tierproxy", text)
    if n != 1:
        fail("no single ExecStart=.../tierproxy line in the unit (found %d)" % n)
    return text


def set_value(lines, section, key, value):
    """Sets KEY of [SECTION] to VALUE in place, its trailing comment kept in its column."""
    current = None
    for i, line in enumerate(lines):
        header = re.match(r"\s*\[([^\]]+)\]", line)
        if header:
            current = header.group(1).strip()
            continue
        m = re.match(r"(%s\s*=\s*)(\S*)(\s*)(;.*)?$" % re.escape(key), line)
        if current == section and m:
            head = m.group(1) + value
            comment = m.group(4)
            if comment:
                column = len(m.group(1)) + len(m.group(2)) + len(m.group(3))
                head = head.ljust(column - 1) + " " + comment
            lines[i] = head
            return
    fail("no '%s =' line in [%s] of the example configuration" % (key, section))


def installed_ini(text):
    lines = text.split("\n")
    for section, key, value in INSTALLED_VALUES:
        set_value(lines, section, key, value)
    return INI_NOTE + "\n".join(lines)


def main(argv):
    if len(argv) == 5 and argv[1] == "unit":
        make = lambda text: installed_unit(text, argv[4])      # noqa: E731
    elif len(argv) == 4 and argv[1] == "ini":
        make = installed_ini
    else:
        fail("usage: installed_files.py unit IN OUT BINDIR | ini IN OUT")
    with open(argv[2], encoding="utf-8") as f:
        text = make(f.read())
    with open(argv[3], "w", encoding="utf-8") as f:
        f.write(text)


if __name__ == "__main__":
    main(sys.argv)
