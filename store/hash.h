/* FNV-1a over bytes and a final avalanche mix: the hash of subjects, lease ids and rule
 * lists in store/ (not for anything an attacker can aim at a fixed table size alone). */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define HASH_FNV_BASIS 1469598103934665603ULL

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
