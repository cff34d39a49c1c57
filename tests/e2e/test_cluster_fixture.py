"""The Redis Cluster fixture itself (issue 14): it reaches cluster_state:ok with three
masters, each with a replica, covering every slot, and keys of different hash tags land
on all three masters. The cluster tests of the proxy rely on this."""


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
    # store/cluster_slot.c use the same ones
    assert redis_cluster.keyslot("foo") == 12182
    assert redis_cluster.keyslot("{user1000}.following") == redis_cluster.keyslot("user1000")
    assert redis_cluster.keyslot("tp:{u:42}:7") == redis_cluster.keyslot("u:42")
