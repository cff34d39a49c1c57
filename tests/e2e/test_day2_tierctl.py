"""tierctl on day two (SPEC.md, "Additions of 2026-11-28", "Day two", the tierctl line):
`--help` after every command and subcommand, flags in any order, `--rate` more than once
(a burst and a sustained rate in one command), booleans as yes/no/on/off/true/false/1/0,
and `plan set` that changes only what it names.

Self-contained: needs only the tierctl binary (TIERCTL_BIN). Each test has its own tmp dir.
Run: /usr/bin/python3 -m pytest tests/e2e/test_day2_tierctl.py
"""
import json
import pathlib
import subprocess

import pytest

from test_simulate import line, write_log
from test_tierctl import TIERCTL, clean_env


class Ctl:
    """tierctl on one catalog file (given with --db where the test puts it)."""

    def __init__(self, tmp):
        self.tmp = pathlib.Path(tmp)
        self.db = self.tmp / "plans.db"

    def run(self, *args, rc=0):
        cmd = [TIERCTL] + [str(self.db) if a is DB else str(a) for a in args]
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean_env(),
                            cwd=str(self.tmp), stdin=subprocess.DEVNULL)
        assert cp.returncode == rc, "%s: exit %d, wanted %d\nstdout: %s\nstderr: %s" % (
            " ".join(cmd), cp.returncode, rc, cp.stdout, cp.stderr)
        return cp

    __call__ = run

    def on_db(self, *args, rc=0):
        return self.run("--db", DB, *args, rc=rc)

    def plan(self, name):
        return json.loads(self.on_db("plan", "show", name, "--json").stdout)


DB = object()   # where a command line names the catalog file


@pytest.fixture
def ctl(tmp_path):
    c = Ctl(tmp_path)
    c.on_db("init")
    return c


def rates(plan, routed=False):
    return [(l["amount"], l["window_ms"], l["burst"], l["algorithm"]) for l in plan["limits"]
            if l["kind"] == "rate" and ("route" in l) == routed]


# ---------------------------------------------------------------------------------------
# --help after every command and subcommand

def command_tree(help_text):
    """The commands `tierctl --help` lists (["plan", "add"], ...): the lines of its first
    part, each a command's words and arguments, then two spaces and what it does; a line
    indented further continues the one before."""
    commands = []
    for text in help_text.splitlines()[1:]:
        if not text.startswith("  "):
            break                                   # LIMIT-FLAGS: and the rest
        if text.startswith("   "):
            continue                                # a long line's description
        words = []
        for w in text.strip().split("  ")[0].split():
            if not w.replace("-", "").isalpha() or not w.islower():
                break
            words.append(w)
        commands.append(words)
    return commands


def test_help_answers_after_every_command_and_subcommand(tmp_path):
    ctl = Ctl(tmp_path)
    top = ctl("--help")
    commands = command_tree(top.stdout)
    assert ["plan", "add"] in commands and ["user", "limit", "add"] in commands, top.stdout
    assert ["simulate"] in commands and ["publish"] in commands, top.stdout
    groups = {tuple(c[:n]) for c in commands for n in range(1, len(c))}
    assert {("plan",), ("limit",), ("user",), ("user", "limit"), ("cost",), ("key",)} <= groups, groups
    for words in sorted(groups) + [tuple(c) for c in commands]:
        cp = ctl(*words, "--help")
        assert cp.stderr == "", (words, cp.stderr)
        first = cp.stdout.splitlines()[0]
        assert first.startswith("usage: tierctl") and " ".join(words) in first, (words, cp.stdout)
        if words in groups:
            # a group's help names each of its commands
            for c in commands:
                if tuple(c[:len(words)]) == words:
                    assert " ".join(c) in cp.stdout, (words, c, cp.stdout)
    # -h as well, and before the command words too
    assert ctl("user", "limit", "-h").stdout == ctl("user", "limit", "--help").stdout
    assert ctl("--help", "plan", "add").stdout == ctl("plan", "add", "--help").stdout
    # A command's help lists the flags it takes.
    out = ctl("plan", "add", "--help").stdout
    for flag in ("--rate", "--burst", "--algorithm", "--shadow", "--priority", "--db"):
        assert flag in out, (flag, out)
    assert "--label" not in out, out
    # Help needs no catalog, and makes none.
    assert list(tmp_path.iterdir()) == []
    # What is not a command stays bad usage.
    cp = ctl("plan", "frob", "--help", rc=2)
    assert "unknown subcommand frob" in cp.stderr, cp.stderr


# ---------------------------------------------------------------------------------------
# flags in any order

def test_flags_may_come_in_any_order(ctl):
    canonical = ctl.on_db("plan", "list", "--json").stdout
    # the global flags after the command, the command's flags before it or between its words
    assert ctl("plan", "list", "--json", "--db", DB).stdout == canonical
    assert ctl("--json", "--db", DB, "plan", "list").stdout == canonical
    assert ctl("plan", "--db", DB, "--json", "list").stdout == canonical
    assert ctl("plan", "--json", "list", "--db=%s" % ctl.db).stdout == canonical
    # flags before the arguments, the arguments between flags
    ctl("plan", "add", "--priority", "7", "--rate", "5/s", "gold", "--concurrency", "3", "--db", DB)
    gold = ctl.plan("gold")
    assert gold["priority"] == 7 and rates(gold) == [(5, 1000, 0, "sliding-log")], gold
    ctl("user", "--plan", "gold", "add", "--db", DB, "alice")
    ctl("--label", "laptop", "key", "--db", DB, "create", "alice")
    keys = json.loads(ctl("key", "list", "alice", "--db", DB, "--json").stdout)
    assert [(k["user"], k["label"]) for k in keys] == [("alice", "laptop")], keys
    user = json.loads(ctl("--json", "user", "show", "--db", DB, "alice").stdout)
    assert user["plan"] == "gold", user


# ---------------------------------------------------------------------------------------
# --rate more than once

def test_rate_twice_makes_a_burst_and_a_sustained_limit(ctl):
    cp = ctl.on_db("plan", "add", "gold", "--rate", "10/s", "--rate", "500/min")
    assert rates(ctl.plan("gold")) == [(10, 1000, 0, "sliding-log"), (500, 60000, 0, "sliding-log")]
    assert "10/s" in cp.stderr and "500/min" in cp.stderr, cp.stderr
    # --burst and --algorithm go with every --rate of the command.
    ctl.on_db("plan", "add", "silver", "--algorithm", "token-bucket", "--rate", "10/s", "--burst", "5",
              "--rate", "500/min")
    assert rates(ctl.plan("silver")) == [(10, 1000, 5, "token-bucket"), (500, 60000, 5, "token-bucket")]
    # limit add: two route limits, their two ids on stdout
    out = ctl.on_db("limit", "add", "gold", "--rate", "2/s", "--rate", "60/h", "--route", "POST /upload").stdout
    ids = [int(x) for x in out.split()]
    routed = [l for l in ctl.plan("gold")["limits"] if "route" in l]
    assert [l["id"] for l in routed] == ids and len(ids) == 2, (out, routed)
    assert rates(ctl.plan("gold"), routed=True) == [(2, 1000, 0, "sliding-log"), (60, 3600000, 0, "sliding-log")]
    # a user's own limits
    ctl.on_db("user", "add", "alice", "--plan", "gold")
    out = ctl.on_db("user", "limit", "add", "alice", "--rate", "20/s", "--rate", "1000/min").stdout
    assert len(out.split()) == 2, out
    own = json.loads(ctl.on_db("user", "show", "alice", "--json").stdout)["limits"]
    assert [(l["amount"], l["window_ms"]) for l in own] == [(20, 1000), (1000, 60000)], own
    # plan set: the plan-wide rate limits become the ones given; a limit of a window given
    # keeps its id (and so its counts)
    before = {l["window_ms"]: l["id"] for l in ctl.plan("gold")["limits"] if "route" not in l}
    ctl.on_db("plan", "set", "gold", "--rate", "20/s", "--rate", "5000/h")
    after = [l for l in ctl.plan("gold")["limits"] if l["kind"] == "rate" and "route" not in l]
    assert [(l["amount"], l["window_ms"]) for l in after] == [(20, 1000), (5000, 3600000)], after
    assert after[0]["id"] == before[1000], (before, after)


def test_rate_twice_refusals_change_nothing(ctl):
    before = ctl.on_db("export").stdout
    for args in (["plan", "add", "x", "--rate", "1/s", "--rate", "2/s"],       # the same window twice
                 ["plan", "add", "x", "--rate", "1/s", "--rate", "60/min", "--rate", "2/1s"],
                 ["limit", "set", "free", "1", "--rate", "1/s", "--rate", "5/min"]):  # one limit
        cp = ctl.on_db(*args, rc=2)
        assert cp.stderr.startswith("tierctl: ") and "usage: tierctl" in cp.stderr, cp.stderr
    assert ctl.on_db("export").stdout == before


def test_simulate_takes_rate_twice(tmp_path):
    # One request a second for 5 s: 2/s never bites, 3/min rejects the last two.
    log = write_log(tmp_path, [line(1000 * i) for i in range(5)])
    report = json.loads(Ctl(tmp_path)("simulate", log, "--rate", "2/s", "--rate", "3/min", "--json").stdout)
    assert report["requests"] == 5 and report["rejected_lines"] == [4, 5], report


# ---------------------------------------------------------------------------------------
# booleans

@pytest.mark.parametrize("word,value", [("yes", True), ("true", True), ("1", True), ("on", True),
                                        ("Yes", True), ("no", False), ("false", False), ("0", False),
                                        ("off", False)])
def test_shadow_reads_every_boolean_word(ctl, word, value):
    ctl.on_db("plan", "add", "gold", "--shadow", word)
    assert ctl.plan("gold")["shadow"] is value
    ctl.on_db("plan", "set", "gold", "--shadow", "off" if value else "on")
    ctl.on_db("plan", "set", "gold", "--shadow=%s" % word)
    assert ctl.plan("gold")["shadow"] is value


# ---------------------------------------------------------------------------------------
# plan set changes only what it names

def test_plan_set_rate_keeps_the_burst_and_the_algorithm(ctl):
    ctl.on_db("plan", "add", "gold", "--rate", "500/min", "--burst", "50", "--algorithm", "token-bucket")
    rate_id = ctl.plan("gold")["limits"][0]["id"]
    cp = ctl.on_db("plan", "set", "gold", "--rate", "1000/min")
    assert rates(ctl.plan("gold")) == [(1000, 60000, 50, "token-bucket")]
    assert ctl.plan("gold")["limits"][0]["id"] == rate_id
    assert "-> 1000/min burst 50 token-bucket" in cp.stderr, cp.stderr
    # another window: the limit is changed in place, keeping what was not given
    ctl.on_db("plan", "set", "gold", "--rate", "20/s")
    assert rates(ctl.plan("gold")) == [(20, 1000, 50, "token-bucket")]
    # what is given changes, and only that
    ctl.on_db("plan", "set", "gold", "--burst", "0")
    assert rates(ctl.plan("gold")) == [(20, 1000, 0, "token-bucket")]
    ctl.on_db("plan", "set", "gold", "--rate", "30/s", "--algorithm", "sliding-window")
    assert rates(ctl.plan("gold")) == [(30, 1000, 0, "sliding-window")]
    assert ctl.plan("gold")["limits"][0]["id"] == rate_id
