/* SipHash and the process's hash key (keyed_hash.h). It owns process_key: drawn once by a
 * constructor before main, written never again, so every thread reads it without a lock. A
 * process that cannot get 16 random bytes aborts rather than hash under a guessable key.
 * The hash functions keep no state. */
#include "store/keyed_hash.h"

#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/rand.h>

static struct hash_key process_key;

/* Before main, so every table of the process hashes under the same key from its first use
 * and no hot path pays for a check. getrandom blocks only until the kernel's pool is first
 * ready (early boot); OpenSSL's generator is the fallback where the call is refused. */
__attribute__((constructor)) static void draw_process_key(void)
{
    unsigned char bytes[16];
    size_t got = 0;
    while (got < sizeof(bytes)) {
        ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got < sizeof(bytes) && RAND_bytes(bytes, (int)sizeof(bytes)) != 1) {
        fputs("tierproxy: no random bytes for the hash key (getrandom and OpenSSL both failed)\n", stderr);
        abort();
    }
    memcpy(&process_key.k0, bytes, 8);
    memcpy(&process_key.k1, bytes + 8, 8);
}

struct hash_key hash_process_key(void)
{
    return process_key;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

struct sip_state {
    uint64_t v0, v1, v2, v3;
};

static inline void sip_round(struct sip_state *s)
{
    s->v0 += s->v1;
    s->v1 = ROTL(s->v1, 13);
    s->v1 ^= s->v0;
    s->v0 = ROTL(s->v0, 32);
    s->v2 += s->v3;
    s->v3 = ROTL(s->v3, 16);
    s->v3 ^= s->v2;
    s->v0 += s->v3;
    s->v3 = ROTL(s->v3, 21);
    s->v3 ^= s->v0;
    s->v2 += s->v1;
    s->v1 = ROTL(s->v1, 17);
    s->v1 ^= s->v2;
    s->v2 = ROTL(s->v2, 32);
}

static inline void sip_word(struct sip_state *s, uint64_t m, int c_rounds)
{
    s->v3 ^= m;
    for (int i = 0; i < c_rounds; i++)
        sip_round(s);
    s->v0 ^= m;
}

static inline uint64_t sip(const struct hash_key *key, int c_rounds, int d_rounds, const unsigned char *p,
                           size_t len)
{
    struct sip_state s = {
        .v0 = key->k0 ^ 0x736f6d6570736575ULL, .v1 = key->k1 ^ 0x646f72616e646f6dULL,
        .v2 = key->k0 ^ 0x6c7967656e657261ULL, .v3 = key->k1 ^ 0x7465646279746573ULL,
    };
    const unsigned char *end = p + (len & ~(size_t)7);
    for (; p < end; p += 8) {
        uint64_t m;
        memcpy(&m, p, 8);
        sip_word(&s, le64toh(m), c_rounds);
    }
    /* the last word: the bytes left, and the length's low byte at the top */
    uint64_t last = (uint64_t)len << 56;
    switch (len & 7) {
    case 7:
        last |= (uint64_t)p[6] << 48;
        __attribute__((fallthrough));
    case 6:
        last |= (uint64_t)p[5] << 40;
        __attribute__((fallthrough));
    case 5:
        last |= (uint64_t)p[4] << 32;
        __attribute__((fallthrough));
    case 4:
        last |= (uint64_t)p[3] << 24;
        __attribute__((fallthrough));
    case 3:
        last |= (uint64_t)p[2] << 16;
        __attribute__((fallthrough));
    case 2:
        last |= (uint64_t)p[1] << 8;
        __attribute__((fallthrough));
    case 1:
        last |= (uint64_t)p[0];
        break;
    default:
        break;
    }
    sip_word(&s, last, c_rounds);
    s.v2 ^= 0xff;
    for (int i = 0; i < d_rounds; i++)
        sip_round(&s);
    return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

uint64_t siphash(const struct hash_key *key, int c_rounds, int d_rounds, const void *data, size_t len)
{
    return sip(key, c_rounds, d_rounds, data, len);
}

uint64_t hash_keyed(const void *data, size_t len)
{
    return sip(&process_key, 1, 3, data, len);
}
