/* FNV-1a over bytes and a final avalanche mix, unkeyed: for values the proxy or the catalog
 * chose (rule fields, lease ids), mixed into a keyed hash of what a client chose. Never the
 * hash of a string a client chooses on its own: that is keyed_hash.h's hash_keyed. */
#pragma once
#include <stddef.h>
#include <stdint.h>

static inline uint64_t hash_fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static inline uint64_t hash_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}
