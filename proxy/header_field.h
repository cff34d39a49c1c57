/* A request's header fields as the gate and what it hands off to read them, and where a
 * list of fields for the upstream goes (gate.h, ws_auth.h). */
#pragma once
#include <stddef.h>

/* One header field as the client sent it; value "" when it had none. Neither needs a NUL. */
struct gate_header {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
};

/* Where the upstream header list goes: emit gets each field in order (name and value are
 * not NUL-terminated); alloc gives memory that lives as long as the list is used. Both
 * return 0 / non-NULL, or the build stops with -ENOMEM. */
struct gate_header_sink {
    int (*emit)(void *ctx, const char *name, size_t name_len, const char *value, size_t value_len);
    void *(*alloc)(void *ctx, size_t n);
    void *ctx;
};
