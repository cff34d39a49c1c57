"""A real Redis Cluster on loopback for the end-to-end tests (issue 14): three masters and
three replicas on ports picked free, made with `redis-cli --cluster create`, stopped by PID.

    with RedisCluster(tmpdir) as c:
        c.seeds                  # ["redis://127.0.0.1:P/0", ...] one per node
        c.seed_list              # the same, comma-separated, as [limits] redis takes it
        c.keyslot("u:{x}")       # CLUSTER KEYSLOT, asked of a node
        c.master_of_key("k")     # the ClusterNode that serves the key's slot now
        c.masters()              # the ClusterNodes that are masters now
        c.move_slot(slot, node)  # reshard one slot (with a hook while it is half moved)
        node.kill(); c.wait_failover(node)   # kill -9 a master, wait for its replica

conftest.py exposes it as the session fixture `redis_cluster` (never kill or reshard that
one: later tests share it) and as `redis_cluster_factory()` for a private cluster a test
may break.
"""
import pathlib
import shutil
import subprocess
import time

REDIS_CLI = "/usr/bin/redis-cli"
NODES, REPLICAS_PER_MASTER = 6, 1
CLUSTER_READY_S = 30


class ClusterNode:
    """One redis-server of the cluster, owned by the RedisCluster that started it."""

    def __init__(self, cluster, port, bus_port):
        self.cluster = cluster
        self.port = port
        # the bus port picked free too (Redis' default, port + 10000, may be taken or
        # fall in the kernel's ephemeral range)
        self.bus_port = bus_port
        self.dir = cluster.tmpdir / ("node-%d" % port)
        self.proc = None

    @property
    def url(self):
        return "redis://127.0.0.1:%d/0" % self.port

    def start(self, redis_server, children):
        self.dir.mkdir(parents=True, exist_ok=True)
        log = open(self.dir / "redis.log", "ab")
        # cluster-node-timeout short: a test that kills a master sees its replica promoted in
        # seconds, not the default 15 s. cluster-require-full-coverage no, as README advises
        # for tierproxy: with the default (yes) every master answers CLUSTERDOWN from the
        # moment one master is marked failed until its replica is promoted (0.74 s measured),
        # so the users of the healthy masters would meet on_store_error too
        self.proc = subprocess.Popen(
            [redis_server, "--port", str(self.port), "--bind", "127.0.0.1",
             "--cluster-enabled", "yes", "--cluster-config-file", str(self.dir / "nodes.conf"),
             "--cluster-port", str(self.bus_port), "--cluster-node-timeout", "2000",
             "--cluster-require-full-coverage", "no",
             "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--dir", str(self.dir), "--protected-mode", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        children.append(self.proc)

    def cmd(self, *args):
        return self.cluster.redis_cmd(self.port, *args)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        """kill -9, as a crash would."""
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def close(self):
        if self.alive():
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def __repr__(self):
        return "ClusterNode(127.0.0.1:%d)" % self.port


class RedisCluster:
    node_class = ClusterNode     # a subclass may start its nodes otherwise (over TLS)

    def __init__(self, tmpdir, free_port, redis_cmd, wait_until, redis_server, children):
        self.tmpdir = pathlib.Path(tmpdir)
        self.redis_cmd = redis_cmd
        self._wait_until = wait_until
        self.nodes = [self.node_class(self, free_port(), free_port()) for _ in range(NODES)]
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        try:
            for n in self.nodes:
                n.start(redis_server, children)
            for n in self.nodes:
                if not wait_until(lambda: self._pings(n), 10):
                    raise RuntimeError("cluster node %r did not answer PING" % n)
            self._create()
            self.wait_ok()
        except BaseException:
            self.close()
            raise

    def _pings(self, node):
        if not node.alive():
            raise RuntimeError("cluster node %r exited (see %s)" % (node, node.dir / "redis.log"))
        try:
            return node.cmd("PING") == "PONG"
        except OSError:
            return False

    def _create(self):
        cli = shutil.which(REDIS_CLI) or shutil.which("redis-cli")
        if not cli:
            raise RuntimeError("redis-cli not found (package redis-tools)")
        argv = [cli] + self.cli_options() + ["--cluster", "create"] + \
            ["127.0.0.1:%d" % n.port for n in self.nodes] + \
            ["--cluster-replicas", str(REPLICAS_PER_MASTER), "--cluster-yes"]
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                           stdin=subprocess.DEVNULL)
        out = r.stdout.decode(errors="replace")
        (self.tmpdir / "cluster-create.log").write_text(out)
        if r.returncode != 0:
            raise RuntimeError("redis-cli --cluster create failed (%d):\n%s" % (r.returncode, out[-3000:]))

    def cli_options(self):
        """redis-cli's options to reach the nodes (a subclass adds --tls ...)."""
        return []

    def state_ok(self, node):
        try:
            info = node.cmd("CLUSTER", "INFO")
        except (OSError, RuntimeError):
            return False
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text

    def wait_ok(self, timeout=CLUSTER_READY_S, with_replicas=True):
        """Waits until every live node says cluster_state:ok and agrees on three masters
        covering all 16384 slots, and (with_replicas) CLUSTER SLOTS lists a replica for
        every range (right after `--cluster create` it lists the masters alone)."""
        def ok():
            live = [n for n in self.nodes if n.alive()]
            return all(self.state_ok(n) for n in live) and \
                all(len(self._masters_seen_by(n)) == NODES // (REPLICAS_PER_MASTER + 1) for n in live) and \
                (not with_replicas or self._replicas_listed(live[0]))
        if not self._wait_until(ok, timeout, 0.2):
            raise RuntimeError("the cluster did not reach cluster_state:ok in %ss" % timeout)

    def _replicas_listed(self, node):
        try:
            slots = node.cmd("CLUSTER", "SLOTS")
        except (OSError, RuntimeError):
            return False
        return all(len(r) >= 3 + REPLICAS_PER_MASTER for r in slots)

    def _masters_seen_by(self, node):
        """{port} of the masters that serve slots, as CLUSTER SLOTS on node tells."""
        try:
            slots = node.cmd("CLUSTER", "SLOTS")
        except (OSError, RuntimeError):
            return set()
        return {int(r[2][1]) for r in slots}

    # ---- what the tests use

    @property
    def seeds(self):
        return [n.url for n in self.nodes]

    @property
    def seed_list(self):
        return ",".join(self.seeds)

    @property
    def url(self):
        """What Proxies.config(store="redis", redis=...) writes as [limits] redis: the
        seeds, comma-separated (the proxy also needs redis_mode = cluster)."""
        return self.seed_list

    def names_on_each_master(self, make_name, per_master=1, tries=10000):
        """{master port: [names]}: per_master names make_name(i) whose slot (of the whole
        name, as a hash tag) is served by each master, so a test can spread users over all."""
        want = {n.port: [] for n in self.masters()}
        owners = self.slot_owners()
        for i in range(tries):
            name = make_name(i)
            slot = self.keyslot(name)
            port = next(p for lo, hi, p in owners if lo <= slot <= hi)
            if len(want[port]) < per_master:
                want[port].append(name)
            if all(len(v) == per_master for v in want.values()):
                return want
        raise RuntimeError("could not find %d names per master" % per_master)

    def any_live(self):
        for n in self.nodes:
            if n.alive():
                return n
        raise RuntimeError("no live node in the cluster")

    def keyslot(self, key):
        return int(self.any_live().cmd("CLUSTER", "KEYSLOT", key))

    def slot_owners(self):
        """[(first slot, last slot, master port)] from CLUSTER SLOTS."""
        slots = self.any_live().cmd("CLUSTER", "SLOTS")
        return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in slots)

    def node_on(self, port):
        for n in self.nodes:
            if n.port == port:
                return n
        raise KeyError(port)

    def master_of_slot(self, slot):
        for lo, hi, port in self.slot_owners():
            if lo <= slot <= hi:
                return self.node_on(port)
        raise KeyError(slot)

    def master_of_key(self, key):
        return self.master_of_slot(self.keyslot(key))

    def masters(self):
        return [self.node_on(p) for p in sorted({port for _, _, port in self.slot_owners()})]

    def keys_on(self, node, pattern):
        """Keys matching pattern on one node (SCAN: test-side only, never the proxy's)."""
        cursor, found = b"0", []
        while True:
            cursor, batch = node.cmd("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
            found += batch
            if cursor in (b"0", "0", 0):
                return found

    def node_id(self, node):
        """The node's cluster id (CLUSTER MYID)."""
        v = node.cmd("CLUSTER", "MYID")
        return v.decode() if isinstance(v, bytes) else v

    def wait_failover(self, dead, timeout=CLUSTER_READY_S):
        """After dead.kill() of a master: waits until its replica serves its slots and every
        live node says cluster_state:ok again. Returns the seconds it took, counted from now."""
        t0 = time.monotonic()

        def taken_over():
            try:
                owners = self.slot_owners()
            except (OSError, RuntimeError):
                return False
            live = [n for n in self.nodes if n.alive()]
            return all(p != dead.port and self.node_on(p).alive() for _, _, p in owners) and \
                sum(hi - lo + 1 for lo, hi, _ in owners) == 16384 and all(self.state_ok(n) for n in live)
        if not self._wait_until(taken_over, timeout, 0.05):
            raise RuntimeError("no replica took over from %r in %ss" % (dead, timeout))
        return time.monotonic() - t0

    def move_slot(self, slot, target, while_migrating=None, batch=100):
        """Moves one slot (with its keys) to the master target, the way redis-cli's reshard
        does it: IMPORTING on target, MIGRATING on the source, MIGRATE the keys, then
        SETSLOT NODE everywhere. while_migrating(source), if given, runs while the slot is
        half moved (its keys still on source answer there; others get ASK to target)."""
        source = self.master_of_slot(slot)
        if source.port == target.port:
            raise ValueError("slot %d is already on %r" % (slot, target))
        source_id, target_id = self.node_id(source), self.node_id(target)
        target.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        source.cmd("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        if while_migrating is not None:
            while_migrating(source)
        while True:
            keys = source.cmd("CLUSTER", "GETKEYSINSLOT", slot, batch)
            if not keys:
                break
            source.cmd("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        # the target first, then the source, then the rest (as redis-cli does)
        for n in [target, source] + [m for m in self.masters() if m.port not in (target.port, source.port)]:
            n.cmd("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self._wait_until(lambda: all(self._owner_seen_by(n, slot) == target.port
                                     for n in self.nodes if n.alive()), 10, 0.05)

    def _owner_seen_by(self, node, slot):
        try:
            for r in node.cmd("CLUSTER", "SLOTS"):
                if int(r[0]) <= slot <= int(r[1]):
                    return int(r[2][1])
        except (OSError, RuntimeError):
            pass
        return None

    def close(self):
        for n in self.nodes:
            n.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
