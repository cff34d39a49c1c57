"""Redis Cluster (issue 14, SPEC "A fleet larger than one Redis"): with redis_mode = cluster
and the seed nodes in [limits] redis, a fleet of proxies enforces every limit exactly for
users whose slots are served by different masters."""
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

from test_config import line_of, run_check  # noqa: E402
from conftest import write_ini  # noqa: E402


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
