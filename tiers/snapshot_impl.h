/* What a snapshot is made of: private to tiers/snapshot.c, which builds and reads it, and
 * tiers/snapshot_patch.c, which makes a new one from an old one and the keys that changed.
 *
 * A patch (snapshot_patch.c): when a change's rows touch api_keys alone, the next snapshot
 * borrows everything of the built one it comes from (a reference to that body; a patch of a
 * patch holds the same body, so the chain never grows) and carries a small table of the
 * keys changed since (the overlay: a key's user, or a mark that it no longer admits), which
 * a lookup reads before the body's table. It is made only when the snapshot served is the
 * version the rows start from and, in one read transaction, the file's mark says it holds
 * exactly the version they made, unchanged; the watcher then waits past that data version,
 * so a local write in between still brings a rebuild. A key whose user is not in the
 * snapshot, or more than 8,192 keys changed since the build, are left to a rebuild.
 */
#pragma once
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tiers/snapshot.h"

struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
};

struct key_slot {
    uint8_t hash[TIER_KEY_HASH_LEN];
    const struct tier_user *user;      /* NULL = empty slot */
};

struct snapshot {
    atomic_long refs;
    struct snapshot *body;             /* a patched snapshot: everything but overlay is body's */
    struct key_slot *overlay;          /* a patched snapshot's keys changed since body: looked */
    size_t overlay_mask;               /* up first; user snapshot_key_removed: no longer admits */
    size_t overlay_n;
    struct tier_plan *plans;
    size_t n_plans;
    struct tier_limit *limits;
    size_t n_limits;
    struct tier_cost *costs;           /* every plan's, in plan id order */
    size_t n_costs;
    struct tier_limit *own_limits;     /* every user's own, grouped by user */
    size_t n_own_limits;
    struct tier_plan *own_plans;       /* one per user with own limits */
    struct tier_limit *merged;         /* the limits of own_plans */
    struct tier_user *users;           /* sorted by id (strcmp) */
    size_t n_users;
    struct key_slot *keys;             /* power-of-two table, at most half full, linear probing */
    size_t key_mask;
    size_t n_keys;
    struct arena_block *arena;
    int64_t catalog_version;           /* the fleet's version of the catalog (catalog_image.h) */
};

/* The first slot a key's hash probes: its first 8 bytes (SHA-256: already uniform). */
static inline size_t snapshot_slot_of(const uint8_t *hash, size_t mask)
{
    uint64_t h;
    memcpy(&h, hash, sizeof(h));
    return (size_t)h & mask;
}

/* The overlay's mark of a key that no longer admits (revoked or deleted since the body). */
extern const struct tier_user snapshot_key_removed;

/* The slot holding hash in a linear-probing table, or the empty slot that ends its run. */
static inline const struct key_slot *snapshot_probe(const struct key_slot *keys, size_t mask, const uint8_t *hash)
{
    size_t s = snapshot_slot_of(hash, mask);
    while (keys[s].user && memcmp(keys[s].hash, hash, TIER_KEY_HASH_LEN) != 0)
        s = (s + 1) & mask;
    return &keys[s];
}

/* The user of a key's hash, or NULL: the overlay first, then the built table. */
static inline const struct tier_user *snapshot_key_user(const struct snapshot *snap, const uint8_t *hash)
{
    if (snap->overlay) {
        const struct key_slot *o = snapshot_probe(snap->overlay, snap->overlay_mask, hash);
        if (o->user)
            return o->user == &snapshot_key_removed ? NULL : o->user;
    }
    return snapshot_probe(snap->keys, snap->key_mask, hash)->user;
}

/* Frees snap now (snapshot_unref calls it at the last reference). */
void snapshot_free(struct snapshot *snap);
