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
