/* API keys: generation and hashing. See apikey.h. */
#include "tiers/apikey.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

static const char hexdigits[] = "0123456789abcdef";

static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;
static EVP_MD *sha256_md;   /* fetched once: an implicit fetch per request is slow */

static void sha256_free(void)
{
    EVP_MD_free(sha256_md);
    sha256_md = NULL;
}

static void sha256_fetch(void)
{
    /* OpenSSL registers its own exit handler while fetching, so ours runs before it. */
    sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (sha256_md)
        atexit(sha256_free);
}

int apikey_generate(char out[APIKEY_TEXT_LEN + 1])
{
    unsigned char raw[APIKEY_RANDOM_BYTES];
    if (RAND_bytes(raw, sizeof(raw)) != 1) {
        memset(out, 0, APIKEY_TEXT_LEN + 1);
        return -EIO;
    }
    memcpy(out, APIKEY_PREFIX, strlen(APIKEY_PREFIX));
    char *p = out + strlen(APIKEY_PREFIX);
    for (size_t i = 0; i < sizeof(raw); i++) {
        *p++ = hexdigits[raw[i] >> 4];
        *p++ = hexdigits[raw[i] & 0x0f];
    }
    *p = '\0';
    OPENSSL_cleanse(raw, sizeof(raw));
    return 0;
}

int apikey_hash(const char *key, size_t key_len, uint8_t out[APIKEY_HASH_LEN])
{
    pthread_once(&sha256_once, sha256_fetch);
    if (!sha256_md)
        return -EIO;
    unsigned int n = 0;
    if (EVP_Digest(key, key_len, out, &n, sha256_md, NULL) != 1 || n != APIKEY_HASH_LEN)
        return -EIO;
    return 0;
}

char *apikey_hash_to_hex(const uint8_t hash[APIKEY_HASH_LEN], char out[APIKEY_HASH_HEX_LEN + 1])
{
    for (size_t i = 0; i < APIKEY_HASH_LEN; i++) {
        out[2 * i] = hexdigits[hash[i] >> 4];
        out[2 * i + 1] = hexdigits[hash[i] & 0x0f];
    }
    out[APIKEY_HASH_HEX_LEN] = '\0';
    return out;
}


int apikey_hash_from_hex(const char *hex, uint8_t out[APIKEY_HASH_LEN])
{
    if (strlen(hex) != APIKEY_HASH_HEX_LEN)
        return -EINVAL;
    for (size_t i = 0; i < APIKEY_HASH_LEN; i++) {
        int hi = OPENSSL_hexchar2int((unsigned char)hex[2 * i]), lo = OPENSSL_hexchar2int((unsigned char)hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -EINVAL;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
