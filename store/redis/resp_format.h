/* A command in RESP, the Redis protocol's framing ("*<argc>\r\n", then "$<len>\r\n<bytes>\r\n"
 * an argument), written without printf. hiredis 0.14's redisFormatSdsCommandArgv builds the
 * same bytes with its own formatter and grows an sds for every piece: about 3.5k
 * instructions for each check on the request path (etc/bench/proxy_cost.py). Pure: no I/O. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* The longest decimal resp_write_int writes: a sign and 19 digits. */
#define RESP_INT_MAX 20

/* Writes v in decimal (no NUL) at buf (RESP_INT_MAX bytes at most); returns its length. */
size_t resp_write_int(char *buf, int64_t v);

/* The bytes resp_format needs for argc arguments of total_len bytes in all, its NUL included. */
size_t resp_format_bound(int argc, size_t total_len);

/* Writes the command argv[0..argc) (lens[i] bytes each, any bytes) at out, which holds
 * resp_format_bound bytes, and a NUL after it; returns its length without the NUL. The NUL
 * is there as in hiredis' own sds: redisAsyncFormattedCommand reads the byte after the first
 * argument, which for a one-argument command (ASKING) is past the command. */
size_t resp_format(char *out, int argc, const char **argv, const size_t *lens);
