#include "proxy/store_log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/access_log.h"
#include "proxy/log_throttle.h"
#include "store/clock.h"

#define REASON_INTERVAL_MS 10000   /* one line per reason at most this often */
#define REASON_KEYS 64             /* reasons remembered at once */

struct store_log_worker {
    struct store_log *log;
    bool down;                     /* its last event was not OK */
};

struct store_log {
    pthread_mutex_t lock;          /* guards what follows, and the order of the lines */
    struct log_throttle *reasons;
    bool log_back;
    size_t n_down;                 /* workers whose store is unreachable or failing */
    int64_t down_since_ms;         /* mono: when the first of them went */
    uint64_t events;               /* failed checks and connections since then */
    size_t n_workers;
    struct store_log_worker workers[];
};

struct store_log *store_log_create(size_t workers, bool log_back)
{
    struct store_log *log = calloc(1, sizeof(*log) + workers * sizeof(log->workers[0]));
    if (log == NULL)
        return NULL;
    log->reasons = log_throttle_create(REASON_KEYS, REASON_INTERVAL_MS);
    if (log->reasons == NULL) {
        free(log);
        return NULL;
    }
    pthread_mutex_init(&log->lock, NULL);
    log->log_back = log_back;
    log->n_workers = workers;
    for (size_t i = 0; i < workers; i++)
        log->workers[i].log = log;
    return log;
}

void store_log_destroy(struct store_log *log)
{
    if (log == NULL)
        return;
    log_throttle_destroy(log->reasons);
    pthread_mutex_destroy(&log->lock);
    free(log);
}

void *store_log_hook_arg(struct store_log *log, size_t index)
{
    return index < log->n_workers ? &log->workers[index] : NULL;
}

/* "store unreachable: <reason>" or "store error: <reason>", with the events it stands for. */
static void write_reason(enum limiter_health health, const char *reason, uint64_t count)
{
    char msg[320];
    snprintf(msg, sizeof(msg), "store %s: %s", health == LIMITER_HEALTH_ERROR ? "error" : "unreachable", reason);
    json_t *line = log_line_start("error", msg);
    if (line == NULL)
        return;
    json_object_set_new(line, "store_error", json_string(reason));
    json_object_set_new(line, "count", json_integer((json_int_t)count));
    log_line_write(line);
}

static void write_back(int64_t away_ms, uint64_t events)
{
    char msg[96];
    snprintf(msg, sizeof(msg), "store back after %.1f s", (double)away_ms / 1000.0);
    json_t *line = log_line_start("info", msg);
    if (line == NULL)
        return;
    json_object_set_new(line, "away_ms", json_integer((json_int_t)away_ms));
    json_object_set_new(line, "count", json_integer((json_int_t)events));
    log_line_write(line);
}

void store_log_event(void *arg, enum limiter_health health, const char *reason)
{
    struct store_log_worker *w = arg;
    if (w == NULL)
        return;
    struct store_log *log = w->log;
    int64_t now = store_mono_ms();
    pthread_mutex_lock(&log->lock);
    if (health == LIMITER_HEALTH_OK) {
        if (w->down && --log->n_down == 0 && log->log_back)
            write_back(now - log->down_since_ms, log->events);
        w->down = false;
    } else {
        if (!w->down && log->n_down++ == 0) {
            log->down_since_ms = now;
            log->events = 0;
        }
        w->down = true;
        log->events++;
        char key[256];
        int len = snprintf(key, sizeof(key), "%d %s", (int)health, reason);
        uint64_t count = 1;
        if (len > 0 && log_throttle_hit(log->reasons, key, (size_t)len < sizeof(key) ? (size_t)len : sizeof(key) - 1,
                                        now, &count))
            write_reason(health, reason, count);
    }
    pthread_mutex_unlock(&log->lock);
}
