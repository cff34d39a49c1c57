/* API keys: generation and hashing. A key is "tp_" followed by 48 lower-case hex digits
 * (192 random bits from OpenSSL's RAND_bytes). The catalog stores only its SHA-256; the
 * proxy hashes what a client presents and looks the hash up, so no comparison of secrets
 * happens in variable time. Nothing here logs anything. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define APIKEY_PREFIX "tp_"
#define APIKEY_RANDOM_BYTES 24                          /* 192 bits */
#define APIKEY_TEXT_LEN (3 + 2 * APIKEY_RANDOM_BYTES)   /* without the NUL */
#define APIKEY_HASH_LEN 32                              /* SHA-256 */
#define APIKEY_HASH_HEX_LEN (2 * APIKEY_HASH_LEN)       /* without the NUL */

/* Writes a new random key and its NUL into out. Returns 0, or -EIO when the random
 * generator fails (out is then cleared). The caller wipes out with OPENSSL_cleanse after
 * use. */
int apikey_generate(char out[APIKEY_TEXT_LEN + 1]);

/* SHA-256 of the key as presented (any bytes, any length). Thread-safe. Returns 0, or
 * -EIO/-ENOMEM when OpenSSL fails. */
int apikey_hash(const char *key, size_t key_len, uint8_t out[APIKEY_HASH_LEN]);

/* Lower-case hex of a hash, NUL-terminated. Returns out. */
char *apikey_hash_to_hex(const uint8_t hash[APIKEY_HASH_LEN], char out[APIKEY_HASH_HEX_LEN + 1]);

/* Parses exactly 64 hex digits (either case). Returns 0 or -EINVAL. */
int apikey_hash_from_hex(const char *hex, uint8_t out[APIKEY_HASH_LEN]);
