/* The access log of access_log.h. It owns struct access_log: the descriptor (closed here
 * only when it is a file it opened, never stdout) and the path kept for reopening. Each
 * line goes out in one write, and a reopen swaps the file under the same descriptor (see
 * struct access_log), so workers write with no lock. A line never holds an API key: the
 * path is logged without the key's query parameter, and a path that is not UTF-8 is logged
 * with '?' for those bytes rather than dropped. */
#include "proxy/access_log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "proxy/log.h"
#include "proxy/ws_auth.h"

/* Workers write with write(2) on fd and never look at anything else here; a reopen
 * (SIGUSR1, main thread) swaps the file under that same descriptor number with dup3,
 * which is atomic: a write lands wholly in the old file or wholly in the new one, and
 * no worker ever writes to a closed or reused descriptor. No lock on the hot path. */
struct access_log {
    int fd;
    bool owned;
    char *path;  /* owned: for reopening */
};

static int open_for_append(const char *path)
{
    return open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
}

int access_log_open(const char *target, struct access_log **plog, char *err, size_t errlen)
{
    struct access_log *log = calloc(1, sizeof(*log));
    if (log == NULL)
        return -ENOMEM;
    if (strcmp(target, "-") == 0) {
        log->fd = STDOUT_FILENO;
    } else {
        log->fd = open_for_append(target);
        if (log->fd < 0) {
            int e = errno;
            snprintf(err, errlen, "access log %s: %s", target, strerror(e));
            free(log);
            return -e;
        }
        log->owned = true;
        log->path = strdup(target);
        if (log->path == NULL) {
            close(log->fd);
            free(log);
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
    }
    *plog = log;
    return 0;
}

void access_log_close(struct access_log *log)
{
    if (log == NULL)
        return;
    if (log->owned)
        close(log->fd);
    free(log->path);
    free(log);
}

int access_log_reopen(struct access_log *log, char *err, size_t errlen)
{
    if (log == NULL || !log->owned)
        return 1;
    int fresh = open_for_append(log->path);
    if (fresh < 0) {
        int e = errno;
        snprintf(err, errlen, "cannot reopen the access log %s: %s; still writing to the old file", log->path,
                 strerror(e));
        return -e;
    }
    int rc = 0;
    if (dup3(fresh, log->fd, O_CLOEXEC) < 0) {
        rc = -errno;
        snprintf(err, errlen, "cannot reopen the access log %s: %s; still writing to the old file", log->path,
                 strerror(-rc));
    }
    close(fresh);
    return rc;
}

static json_t *str_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

/* A path that is not valid UTF-8 is logged with those bytes as '?', not dropped. */
static json_t *path_json(const char *path)
{
    json_t *s = json_string(path);
    if (s != NULL)
        return s;
    char *copy = strdup(path);
    if (copy == NULL)
        return json_null();
    for (char *p = copy; *p != '\0'; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    s = json_string(copy);
    free(copy);
    return s != NULL ? s : json_null();
}

/* The path without the key's query parameter (ws_auth.h): never a key in the log. */
static json_t *logged_path(const char *path, const char *key_query)
{
    if (key_query == NULL || strchr(path, '?') == NULL)
        return path_json(path);
    char *stripped = malloc(strlen(path) + 1);
    if (stripped == NULL)
        return json_null();
    json_t *s = path_json(ws_auth_query_strip(path, key_query, stripped));
    free(stripped);
    return s;
}

void access_log_write(struct access_log *log, const struct access_entry *e)
{
    if (log == NULL)
        return;
    char when[40];
    log_format_time(e->time_unix_ms, when, sizeof(when));
    json_t *o = json_object();
    if (o == NULL)
        return;
    json_object_set_new(o, "time", json_string(when));
    json_object_set_new(o, "client", str_or_null(e->client));
    json_object_set_new(o, "method", str_or_null(e->method));
    json_object_set_new(o, "path", e->path != NULL ? logged_path(e->path, e->path_key_query) : json_null());
    json_object_set_new(o, "status", json_integer(e->status));
    json_object_set_new(o, "user", str_or_null(e->user));
    json_object_set_new(o, "plan", str_or_null(e->plan));
    json_object_set_new(o, "decision", str_or_null(e->decision));
    if (e->decision_unix_ms > 0) {
        /* What `tierctl simulate` replays at: `time` is when the request ended. */
        char decided[40];
        log_format_time(e->decision_unix_ms, decided, sizeof(decided));
        json_object_set_new(o, "decision_time", json_string(decided));
    }
    if (e->has_limit) {
        json_object_set_new(o, "limit", json_integer(e->limit));
        json_object_set_new(o, "remaining", json_integer(e->remaining));
    }
    if (e->limit_type != NULL) {
        json_object_set_new(o, "user_id", str_or_null(e->user));
        json_object_set_new(o, "limit_type", json_string(e->limit_type));
        json_object_set_new(o, "current_count", json_integer(e->current_count));
    }
    json_object_set_new(o, "upstream_ms", e->upstream_ms >= 0 ? json_integer(e->upstream_ms) : json_null());
    if (e->upstream_error != NULL)
        json_object_set_new(o, "upstream_error", json_string(e->upstream_error));
    json_object_set_new(o, "total_ms", json_integer(e->total_ms));
    json_object_set_new(o, "bytes_sent", json_integer((json_int_t)e->bytes_sent));
    log_write_json(log->fd, o);
    json_decref(o);
}
