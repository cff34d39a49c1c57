/* The hash of strings a client chooses (client addresses, user ids): SipHash-1-3 under a
 * 128-bit key drawn at random when the process starts, so that nobody who cannot read this
 * process's memory can pick many strings that fall in one bucket of a table (HashDoS).
 * SipHash (Aumasson and Bernstein, 2012) is a keyed PRF over short inputs; 1-3 is the
 * variant of one compression and three finalisation rounds that Rust's HashMap and CPython
 * use for the same purpose. Fixed-width values the proxy or the catalog chose are mixed in
 * after it with hash.h.
 *
 * The key is drawn before main by a constructor (no hot path checks whether it is drawn),
 * from getrandom, or OpenSSL's RAND_bytes where getrandom is refused. OpenSSL 3.0 has
 * SipHash as an EVP_MAC, which the unit test checks this one against for every length up to
 * 64 bytes, but a fetch, a context and four calls a hash cost more than the hash. Nothing
 * hashed this way leaves the process (Redis keys name subjects in full; a Cluster's slot is
 * Redis' CRC16), so each process may place keys its own way.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>

struct hash_key {
    uint64_t k0, k1;
};

/* SipHash-c-d of data under key (c compression rounds a word, d finalisation rounds): the
 * reference's algorithm, with its key and words read little-endian. */
uint64_t siphash(const struct hash_key *key, int c_rounds, int d_rounds, const void *data, size_t len);

/* SipHash-1-3 of data under the process's key. */
uint64_t hash_keyed(const void *data, size_t len);

/* The process's key (drawn once, before main, from getrandom), for tests. */
struct hash_key hash_process_key(void);
