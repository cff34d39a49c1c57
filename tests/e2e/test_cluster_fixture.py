"""The Redis Cluster fixture itself (issue 14): it reaches cluster_state:ok with three
masters, each with a replica, covering every slot, and keys of different hash tags land
on all three masters. The cluster tests of the proxy rely on this. It runs no tierproxy code,
so a sanitizer build skips it."""
import pytest

from conftest import SANITIZED

pytestmark = pytest.mark.skipif(SANITIZED, reason="checks the test fixture, not tierproxy")


def test_cluster_reaches_state_ok_with_three_masters_and_their_replicas(redis_cluster):
    for node in redis_cluster.nodes:
        assert redis_cluster.state_ok(node), node
    owners = redis_cluster.slot_owners()
    covered = sum(hi - lo + 1 for lo, hi, _ in owners)
    assert covered == 16384, owners
    assert len(redis_cluster.masters()) == 3
    roles = [node.cmd("ROLE")[0] for node in redis_cluster.nodes]
    assert sorted(r.decode() if isinstance(r, bytes) else r for r in roles) == \
        ["master"] * 3 + ["slave"] * 3
    assert len(redis_cluster.seeds) == 6
    assert redis_cluster.seed_list.count(",") == 5


def test_keys_with_different_hash_tags_land_on_all_three_masters(redis_cluster):
    masters = set()
    for i in range(30):
        key = "fixture:{u:user%d}:1" % i
        master = redis_cluster.master_of_key(key)
        assert master.cmd("SET", key, "1") == "OK"      # no MOVED: the helper found its master
        masters.add(master.port)
    assert len(masters) == 3, masters


def test_keyslot_follows_the_hash_tag(redis_cluster):
    # the values Redis computes (CRC16/XMODEM of the tag, mod 16384); the unit tests of
    # store/redis/cluster_slot.c use the same ones
    assert redis_cluster.keyslot("foo") == 12182
    assert redis_cluster.keyslot("{user1000}.following") == redis_cluster.keyslot("user1000")
    assert redis_cluster.keyslot("tp:{u:42}:7") == redis_cluster.keyslot("u:42")


def test_move_slot_moves_the_keys_and_asks_while_migrating(redis_cluster_factory):
    c = redis_cluster_factory()
    key, absent = "fixture:{mover}:1", "fixture:{mover}:2"
    slot = c.keyslot(key)
    source = c.master_of_slot(slot)
    assert source.cmd("SET", key, "v") == "OK"
    target = next(m for m in c.masters() if m.port != source.port)
    seen = {}

    def while_migrating(src):
        # a key still on the source answers there; one that is not gets ASK to the target
        seen["present"] = src.cmd("GET", key)
        try:
            src.cmd("GET", absent)
        except RuntimeError as e:
            seen["absent"] = str(e)
    c.move_slot(slot, target, while_migrating)
    assert seen["present"] == b"v"
    assert seen["absent"] == "ASK %d 127.0.0.1:%d" % (slot, target.port)
    assert c.master_of_key(key).port == target.port
    assert target.cmd("GET", key) == b"v"
    try:
        source.cmd("GET", key)
        raise AssertionError("the source still answers for slot %d" % slot)
    except RuntimeError as e:
        assert str(e) == "MOVED %d 127.0.0.1:%d" % (slot, target.port)


def test_kill_a_master_and_its_replica_takes_over(redis_cluster_factory):
    c = redis_cluster_factory()
    key = "fixture:{victim}:1"
    victim = c.master_of_key(key)
    assert victim.cmd("SET", key, "v") == "OK"
    assert victim.cmd("WAIT", 1, 2000) == 1          # the replica has it before the crash
    victim.kill()
    gap = c.wait_failover(victim)
    heir = c.master_of_key(key)
    assert heir.port != victim.port and heir.alive()
    assert heir.cmd("GET", key) == b"v"
    assert gap < 20, gap
