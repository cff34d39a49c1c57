"""Redis Cluster (issue 14, SPEC "A fleet larger than one Redis"): with redis_mode = cluster
and the seed nodes in [limits] redis, a fleet of proxies enforces every limit exactly for
users whose slots are served by different masters."""
import json
import re
import threading
import time

from conftest import SLOW, assert_json_error, free_port, log_lines, wait_until, write_ini
from test_config import line_of, run_check
from test_exactness import LIMIT, PER_THREAD, REPEATS, THREADS, WINDOW_S, hammer


def cluster_proxy(proxies, catalog, redis_cluster, prefix):
    return proxies.start(catalog, store="redis", redis=redis_cluster, key_prefix=prefix,
                         limits={"redis_mode": "cluster"})


def test_exact_across_two_proxies_for_users_on_all_three_masters(catalog, proxies, redis_cluster):
    prefix = "cx%d:" % id(catalog)
    # per round one user whose subject "u:<id>" (the keys' hash tag) each master serves
    rounds = []
    for rep in range(REPEATS):
        plan = catalog.plan("cexact%d" % rep, "--rate", "%d/%ds" % (LIMIT, WINDOW_S))
        spread = redis_cluster.names_on_each_master(lambda i, rep=rep: "u:c%d_%d" % (rep, i))
        users = []
        for port, names in sorted(spread.items()):
            user_id = names[0][len("u:"):]
            catalog.user(plan, user_id)
            users.append((port, user_id, catalog.key(user_id)))
        rounds.append(users)
    ps = [cluster_proxy(proxies, catalog, redis_cluster, prefix) for _ in range(2)]
    for rep, users in enumerate(rounds):
        for port, user_id, key in users:
            statuses, elapsed = hammer(ps, key)
            assert elapsed < WINDOW_S - 0.5, \
                "round %d took %.1fs, longer than the window: inconclusive" % (rep, elapsed)
            assert len(statuses) == THREADS * PER_THREAD
            assert set(statuses) <= {200, 429}, sorted(set(statuses))
            admitted = statuses.count(200)
            assert admitted == LIMIT, "round %d, user %s (master :%d): %d admitted, limit %d in %ds" % (
                rep, user_id, port, admitted, LIMIT, WINDOW_S)
            # the count lives on the master that serves the user's slot, nowhere else
            master = redis_cluster.node_on(port)
            assert redis_cluster.keys_on(master, "%s{u:%s}:*" % (prefix, user_id)), \
                "no key of user %s on its master :%d" % (user_id, port)
    for master in redis_cluster.masters():
        assert redis_cluster.keys_on(master, prefix + "*"), "master :%d holds no key" % master.port


# ---- configuration: redis_mode and the seed list (SPEC: redis_mode = single | cluster;
# in cluster mode [limits] redis holds several seed URLs, comma-separated)


def redis_ini(proxies, catalog, tmp_path, name, **limits):
    ini = proxies.config(catalog, store="redis", redis=type("R", (), {"url": "redis://127.0.0.1:6379/0"})())
    ini["limits"].update(limits)
    path = tmp_path / name
    write_ini(path, ini)
    return path


def test_redis_mode_bad_value_names_file_line_and_the_choices(proxies, catalog, tmp_path):
    path = redis_ini(proxies, catalog, tmp_path, "mode.ini", redis_mode="sharded")
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "redis_mode =")) in out, out
    assert "single or cluster" in out, out


def test_single_mode_with_a_seed_list_says_to_set_cluster_mode(proxies, catalog, tmp_path):
    path = redis_ini(proxies, catalog, tmp_path, "seeds-single.ini",
                     redis="redis://127.0.0.1:7000/0,redis://127.0.0.1:7001/0")
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "redis =")) in out, out
    assert "redis_mode = cluster" in out, out


def test_cluster_seed_list_errors_name_the_seed_and_hide_passwords(proxies, catalog, tmp_path):
    cases = [
        # (seed list, what the error must say)
        ("redis://:s3cretpw@127.0.0.1:7000/0,unix:///tmp/redis.sock", "seed 2"),
        ("redis://:s3cretpw@127.0.0.1:7000/0,redis://127.0.0.1:7001/3", "database 0"),
        ("redis://:s3cretpw@127.0.0.1:7000/0,,redis://127.0.0.1:7001/0", "seed 2"),
        ("redis://:s3cretpw@127.0.0.1:7000/0,redis://127.0.0.1:99999/0", "seed 2"),
    ]
    for i, (seeds, says) in enumerate(cases):
        path = redis_ini(proxies, catalog, tmp_path, "seeds%d.ini" % i, redis_mode="cluster", redis=seeds)
        cp, out = run_check(path)
        assert cp.returncode == 1, (seeds, out)
        assert "%s:%d" % (path, line_of(path, "redis =")) in out, (seeds, out)
        assert says in out, (seeds, out)
        assert "s3cretpw" not in out, out


def test_check_reaches_the_seeds_and_reports_the_cluster_state(proxies, catalog, tmp_path, redis_cluster):
    # a dead seed first: --check goes on to the next one
    seeds = "redis://127.0.0.1:%d/0,%s" % (free_port(), redis_cluster.seed_list)
    path = redis_ini(proxies, catalog, tmp_path, "check-cluster.ini", redis_mode="cluster", redis=seeds)
    cp, out = run_check(path)
    assert "cluster_state ok: 3 masters serve all 16384 slots" in out, out


def test_check_warns_about_cluster_require_full_coverage(proxies, catalog, tmp_path, redis_cluster):
    path = redis_ini(proxies, catalog, tmp_path, "check-coverage.ini", redis_mode="cluster",
                     redis=redis_cluster.seed_list)
    cp, out = run_check(path)
    assert cp.returncode == 0 and "cluster-require-full-coverage" not in out, out
    nodes = [n for n in redis_cluster.nodes if n.alive()]
    try:
        for n in nodes:   # Redis' default
            n.cmd("CONFIG", "SET", "cluster-require-full-coverage", "yes")
        cp, out = run_check(path)
    finally:
        for n in nodes:
            n.cmd("CONFIG", "SET", "cluster-require-full-coverage", "no")
    # said, not refused: the cluster works, a failover just reaches every user
    assert cp.returncode == 0, out
    assert "warning: cluster-require-full-coverage is yes" in out and "set it to no" in out, out


def test_check_warns_when_no_seed_answers(proxies, catalog, tmp_path):
    # SPEC "Faults keep their promises": a store --check cannot reach is a warning (a start
    # survives it: on_store_error decides until it answers)
    dead = [free_port(), free_port()]
    seeds = "redis://:s3cretpw@127.0.0.1:%d/0,redis://127.0.0.1:%d/0" % tuple(dead)
    path = redis_ini(proxies, catalog, tmp_path, "check-dead.ini", redis_mode="cluster", redis=seeds)
    cp, out = run_check(path)
    assert cp.returncode == 0, out
    assert [ln for ln in log_lines(cp.stderr) if ln["level"] == "warn" and
            "[limits] redis: no seed answered" in ln["msg"]], out
    for port in dead:
        assert "127.0.0.1:%d" % port in out, out
    assert "s3cretpw" not in out, out


def test_check_says_when_a_seed_is_not_a_cluster_node(proxies, catalog, tmp_path, redis):
    path = redis_ini(proxies, catalog, tmp_path, "check-plain.ini", redis_mode="cluster", redis=redis.url)
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    assert "127.0.0.1:%d is not a cluster node" % redis.port in out, out


def test_cluster_mode_refuses_a_key_prefix_with_a_hash_tag(proxies, catalog, tmp_path, redis_cluster):
    # "tp{x}:" would make Redis hash "x" for every key: every subject on one master
    path = redis_ini(proxies, catalog, tmp_path, "prefix-tag.ini", redis_mode="cluster",
                     redis=redis_cluster.seed_list, key_prefix="tp{x}:")
    cp, out = run_check(path)
    assert cp.returncode == 1, out
    assert "%s:%d" % (path, line_of(path, "key_prefix =")) in out, out
    assert "'{'" in out, out


def test_check_passes_on_a_healthy_cluster(proxies, catalog, tmp_path, redis_cluster):
    path = redis_ini(proxies, catalog, tmp_path, "check-ok.ini", redis_mode="cluster",
                     redis=redis_cluster.seed_list)
    cp, out = run_check(path)
    assert cp.returncode == 0, out
    assert "cluster_state ok" in out, out


# ---- a cluster that changes under the fleet: failover and resharding (private clusters)


CHANGE_LIMIT = 30       # per CHANGE_WINDOW: long, so one window spans the whole test
CHANGE_WINDOW = "%d/300s" % CHANGE_LIMIT


def user_on(catalog, cluster, plan, master_port, tag):
    """A new user of plan whose subject's slot master_port serves; returns (user id, key)."""
    names = cluster.names_on_each_master(lambda i: "u:%s%d" % (tag, i))[master_port]
    user_id = names[0][len("u:"):]
    catalog.user(plan, user_id)
    return user_id, catalog.key(user_id)


def test_failover_of_a_master_spares_the_others_and_enforcement_comes_back(
        catalog, proxies, redis_cluster_factory):
    c = redis_cluster_factory()
    plan = catalog.plan("fo", "--rate", CHANGE_WINDOW)
    victim, other = c.masters()[0], c.masters()[1]
    victim_user, key_victim = user_on(catalog, c, plan, victim.port, "v")
    _, key_other = user_on(catalog, c, plan, other.port, "o")
    ps = [proxies.start(catalog, store="redis", redis=c, key_prefix="fo:",
                        limits={"redis_mode": "cluster", "on_store_error": "closed"}) for _ in range(2)]
    clients = [p.client() for p in ps]
    other_statuses = []
    for i in range(5):
        assert clients[i % 2].get("/before", key=key_victim).status == 200
        other_statuses.append(clients[i % 2].get("/before", key=key_other).status)

    health = json.loads(ps[0].admin("/health").body)
    assert health["store"] == "ok", health
    assert sorted(health["nodes"]) == sorted("127.0.0.1:%d" % m.port for m in c.masters()), health
    assert set(health["nodes"].values()) == {"ok"}, health

    victim.kill()
    t_kill = time.monotonic()
    seen_degraded = False
    # until the proxies follow the promoted replica, the victim's users get on_store_error
    # (closed: 503 limiter_unavailable) and nothing else; the other master's users are
    # enforced exactly throughout
    gap = None
    i = 0
    while time.monotonic() - t_kill < 30:
        r = clients[i % 2].get("/during", key=key_victim)
        other_statuses.append(clients[i % 2].get("/during", key=key_other).status)
        i += 1
        if r.status == 503:
            assert_json_error(r, 503, {"error_code": "limiter_unavailable"})
            if not seen_degraded:
                # the proxy says which master it cannot reach, and still serves (200); the
                # first 503 may be the lost connection's, before a reconnect has failed, and
                # on a loaded box the map may follow the failover before /health is asked
                p = ps[(i - 1) % 2]
                victim_node = "127.0.0.1:%d" % victim.port

                def victim_not_ok():
                    h = p.admin("/health")
                    assert h.status == 200, h
                    body = json.loads(h.body)
                    return body if body["nodes"].get(victim_node) != "ok" else None
                body = wait_until(victim_not_ok, 5 * SLOW)
                assert body, "/health still says %s ok after its 503" % victim_node
                if victim_node in body["nodes"]:
                    assert body["store"] == "degraded", body
                    assert body["nodes"][victim_node] == "unreachable", body
                    assert body["nodes"]["127.0.0.1:%d" % other.port] == "ok", body
                    metrics = p.admin("/metrics").body.decode()
                    assert metric(metrics, "tierproxy_store_node_errors_total", victim.port) > 0, metrics
                    assert metric(metrics, "tierproxy_store_node_errors_total", other.port) == 0, metrics
                    assert metric(metrics, "tierproxy_store_node_up", victim.port) == 0, metrics
                    assert metric(metrics, "tierproxy_store_node_up", other.port) == 1, metrics
                seen_degraded = True
            time.sleep(0.02)
            continue
        assert r.status == 200, r.status
        gap = time.monotonic() - t_kill
        break
    assert gap is not None, "the victim's users were still refused 30 s after the kill"
    assert seen_degraded, "no 503 for the victim's user after the kill"
    print("failover gap seen by the proxies: %.2f s (cluster-node-timeout 2000 ms)" % gap)

    # exact again on the promoted replica: a fresh user there gets exactly the limit
    c.wait_failover(victim)
    heir = c.master_of_key("u:" + victim_user)
    assert heir.port != victim.port and heir.alive()
    fresh_plan = catalog.plan("fo2", "--rate", CHANGE_WINDOW)
    _, key_fresh = user_on(catalog, c, fresh_plan, heir.port, "f")
    time.sleep(0.5)      # the proxies' catalog refresh (refresh_ms 200)
    fresh = [clients[j % 2].get("/after", key=key_fresh).status for j in range(2 * CHANGE_LIMIT)]
    assert set(fresh) <= {200, 429}, sorted(set(fresh))
    assert fresh.count(200) == CHANGE_LIMIT, fresh
    for _ in range(2 * CHANGE_LIMIT):
        other_statuses.append(clients[0].get("/after", key=key_other).status)
    assert set(other_statuses) <= {200, 429}, sorted(set(other_statuses))
    assert other_statuses.count(200) == CHANGE_LIMIT, other_statuses
    # the proxy's map of the cluster follows the failover: the heir in, the dead master out
    # (a refresh on the next MOVED or the periodic one, later on a loaded box)
    health = {}

    def map_follows():
        health.update(json.loads(ps[0].admin("/health").body))
        return (health["store"] == "ok" and "127.0.0.1:%d" % heir.port in health["nodes"]
                and "127.0.0.1:%d" % victim.port not in health["nodes"])
    assert wait_until(map_follows, 10 * SLOW), health
    for cl in clients:
        cl.close()


def test_failover_with_local_fallback_decides_the_victims_users_locally(catalog, proxies, redis_cluster_factory):
    """The default on_store_error = local: while a master fails over, its users are decided
    in each proxy's memory (decision "local", never 503), the other master's users on Redis
    exactly, and the victim's users are on Redis again once the replica serves."""
    c = redis_cluster_factory()
    plan = catalog.plan("fol", "--rate", CHANGE_WINDOW)
    victim, other = c.masters()[0], c.masters()[1]
    victim_user, key_victim = user_on(catalog, c, plan, victim.port, "lv")
    _, key_other = user_on(catalog, c, plan, other.port, "lo")
    ps = [proxies.start(catalog, store="redis", redis=c, key_prefix="fol:",
                        limits={"redis_mode": "cluster"}) for _ in range(2)]
    clients = [p.client() for p in ps]
    other_statuses = [clients[i % 2].get("/before", key=key_other).status for i in range(4)]
    assert clients[0].get("/before", key=key_victim).status == 200
    victim.kill()
    t_kill = time.monotonic()
    # ~10 requests a second of the victim's user (fewer than the limit in all: each is
    # admitted, locally or on Redis), until a second after the replica serves its slots
    sent_at, during, t_over = [], [], None
    while time.monotonic() - t_kill < 30:
        n = len(during)
        sent_at.append(time.monotonic())
        during.append(clients[n % 2].get("/during/%d" % n, key=key_victim).status)
        other_statuses.append(clients[n % 2].get("/other", key=key_other).status)
        if t_over is None and all(p != victim.port for _, _, p in c.slot_owners()):
            t_over = time.monotonic()
        if t_over is not None and time.monotonic() - t_over > 1.5:
            break
        time.sleep(0.1)
    assert t_over is not None, "no replica took over in 30 s"
    assert during == [200] * len(during), during          # never 503: decided locally
    time.sleep(0.3)   # the access log lines of the last requests
    decision = {}
    for p in ps:
        for ln in p.access_log_lines():
            if ln.get("path", "").startswith("/during/"):
                decision[int(ln["path"].rsplit("/", 1)[1])] = ln["decision"]
    assert len(decision) == len(during), decision
    local = [n for n in sorted(decision) if decision[n] == "local"]
    assert local, decision
    late = [n for n in sorted(decision) if sent_at[n] > t_over + 1.0]
    assert late and all(decision[n] == "allowed" for n in late), [(n, decision[n]) for n in late]
    print("the victim's user decided locally from %.2f s to %.2f s after the kill; the cluster "
          "served its slots again by %.2f s" % (sent_at[local[0]] - t_kill, sent_at[local[-1]] - t_kill,
                                                t_over - t_kill))
    # the other master's user: on Redis throughout, exactly the limit in all
    for _ in range(2 * CHANGE_LIMIT):
        other_statuses.append(clients[0].get("/after", key=key_other).status)
    assert set(other_statuses) <= {200, 429}, sorted(set(other_statuses))
    other_log = [(ln.get("path"), ln["decision"]) for p in ps for ln in p.access_log_lines()
                 if ln.get("path") in ("/other", "/after")]
    assert other_statuses.count(200) == CHANGE_LIMIT, (other_statuses.count(200), sorted(set(other_log)), [d for _, d in other_log].count("local"))
    for cl in clients:
        cl.close()


def metric(text, name, port):
    """The value of name{node="127.0.0.1:port"} in a /metrics text (None when absent)."""
    m = re.search(r'^%s\{node="127\.0\.0\.1:%d"\} (\S+)$' % (name, port), text, re.M)
    return float(m.group(1)) if m else None


def test_resharding_a_busy_users_slot_keeps_the_count_exact(catalog, proxies, redis_cluster_factory):
    c = redis_cluster_factory()
    plan = catalog.plan("rs", "--rate", CHANGE_WINDOW)
    source = c.masters()[0]
    user_id, key = user_on(catalog, c, plan, source.port, "b")
    target = c.masters()[1]
    ps = [proxies.start(catalog, store="redis", redis=c, key_prefix="rs:",
                        limits={"redis_mode": "cluster", "on_store_error": "closed"}) for _ in range(2)]
    statuses, lock, stop = [], threading.Lock(), threading.Event()

    def load(i):
        cl = ps[i % 2].client()
        mine = []
        try:
            # slowly enough that requests keep coming across the whole migration, and
            # bounded: the limit is reached before the last of them
            for _ in range(2 * CHANGE_LIMIT):
                if stop.is_set():
                    break
                mine.append(cl.get("/busy", key=key).status)
                time.sleep(0.05)
        finally:
            cl.close()
            with lock:
                statuses.extend(mine)
    ts = [threading.Thread(target=load, args=(i,)) for i in range(2)]
    for t in ts:
        t.start()
    time.sleep(0.3)
    slot = c.keyslot("u:" + user_id)
    asking_before = commandstat_calls(target, "asking")

    def keys_moved_slot_not_yet(src):
        # the user's keys go first and the slot stays MIGRATING for a while: every check of
        # the user meets ASK at the source and must be asked again at the target
        while True:
            keys = src.cmd("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            src.cmd("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        time.sleep(1.0)
    # the user's keys (hash tag "u:<id>") move while the load runs
    c.move_slot(slot, target, while_migrating=keys_moved_slot_not_yet)
    for t in ts:
        t.join(60)
    stop.set()
    assert set(statuses) <= {200, 429}, sorted(set(statuses))
    assert statuses.count(200) == CHANGE_LIMIT, "%d admitted, limit %d" % (statuses.count(200), CHANGE_LIMIT)
    assert c.keys_on(target, "rs:{u:%s}:*" % user_id), "the user's keys are not on the new master"
    print("ASKING calls on the target during the move: %d" % (commandstat_calls(target, "asking") - asking_before))


def commandstat_calls(node, command):
    """Calls of command a node has served (INFO commandstats)."""
    info = node.cmd("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        if line.startswith("cmdstat_%s:" % command):
            return int(line.split("calls=")[1].split(",")[0])
    return 0


def test_tierctl_usage_reads_the_counts_on_each_master(catalog, proxies, redis_cluster):
    """`tierctl usage --config <the proxy's ini>` in cluster mode peeks each user's counts on
    the master that serves the user's slot."""
    prefix = "cu%d:" % id(catalog)
    plan = catalog.plan("cusage", "--rate", "20/min")
    spread = redis_cluster.names_on_each_master(lambda i: "u:cu%d" % i)
    users = []
    for port, names in sorted(spread.items()):
        user_id = names[0][len("u:"):]
        catalog.user(plan, user_id)
        users.append((port, user_id, catalog.key(user_id)))
    p = cluster_proxy(proxies, catalog, redis_cluster, prefix)
    for n, (port, user_id, key) in enumerate(users, start=1):
        for _ in range(n):
            assert p.get("/u", key=key).status == 200
    for n, (port, user_id, key) in enumerate(users, start=1):
        cp = catalog.run("usage", user_id, "--json", "--config", str(p.ini_path), check=False)
        assert cp.returncode == 0, (port, cp.stderr)
        rate = [lim for lim in json.loads(cp.stdout)["limits"] if lim["kind"] == "rate"]
        assert len(rate) == 1 and (rate[0]["limit"], rate[0]["used"]) == (20, n), (port, cp.stdout)
