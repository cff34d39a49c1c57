/* A command-line tool's conversation with Redis, kept alive through a broken connection.
 *
 * A write to a connection that Redis has reset raises SIGPIPE, whose default ends the process
 * without a word: Redis resets an unauthenticated client that sends a command over 16 KiB,
 * a client over its output limit, every client when it restarts. Between ignore and restore
 * the write fails with EPIPE instead and the tool says why. Outside, SIGPIPE keeps its
 * default, so output to a closed pipe (`tierctl key list | head -1`) still ends the tool
 * quietly, as it ends any filter. The daemon ignores SIGPIPE for good (proxy/main.c). */
#pragma once
#include <signal.h>

struct redis_sigpipe {
    struct sigaction saved;
    int held;
};

void redis_sigpipe_ignore(struct redis_sigpipe *s);
void redis_sigpipe_restore(struct redis_sigpipe *s);
