"""Exactness under concurrency: across any number of proxies on one Redis, no window ever
admits more than limit+burst — and no fewer while requests keep coming."""
import threading
import time

LIMIT, WINDOW_S, THREADS, PER_THREAD, REPEATS = 50, 10, 8, 20, 5


def hammer(proxies_, key):
    """THREADS client threads, each on its own keep-alive connection to one of the proxies,
    send PER_THREAD requests as fast as they can. Returns (statuses, elapsed seconds)."""
    statuses = []
    lock = threading.Lock()
    errors = []
    start = threading.Barrier(THREADS)

    def worker(i):
        c = proxies_[i % len(proxies_)].client()
        mine = []
        try:
            start.wait()
            for _ in range(PER_THREAD):
                mine.append(c.get("/exact", key=key).status)
        except Exception as e:  # reported below, not swallowed
            errors.append(repr(e))
        finally:
            c.close()
            with lock:
                statuses.extend(mine)
    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    elapsed = time.monotonic() - t0
    assert not errors, errors
    return statuses, elapsed


def run_rounds(catalog, make_proxies):
    keys = []
    for rep in range(REPEATS):
        # a fresh plan (so a fresh limit) and a fresh user each round
        plan = catalog.plan("exact%d" % rep, "--rate", "%d/%ds" % (LIMIT, WINDOW_S))
        keys.append(catalog.user_key(plan)[1])
    ps = make_proxies()
    for rep, key in enumerate(keys):
        statuses, elapsed = hammer(ps, key)
        assert elapsed < WINDOW_S - 0.5, \
            "round %d took %.1fs, longer than the window: inconclusive" % (rep, elapsed)
        assert len(statuses) == THREADS * PER_THREAD
        assert set(statuses) <= {200, 429}, sorted(set(statuses))
        admitted = statuses.count(200)
        assert admitted == LIMIT, "round %d: %d admitted, limit %d in %ds" % (
            rep, admitted, LIMIT, WINDOW_S)


def test_exact_across_two_proxies_on_one_redis(catalog, proxies, redis):
    prefix = "exact%d:" % id(catalog)

    def make():
        return [proxies.start(catalog, store="redis", redis=redis, key_prefix=prefix)
                for _ in range(2)]
    run_rounds(catalog, make)


def test_exact_under_concurrency_memory(catalog, proxies):
    run_rounds(catalog, lambda: [proxies.start(catalog, store="memory")])
