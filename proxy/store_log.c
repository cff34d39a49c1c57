/* The process's one record of store outages (store_log.h), shared by every worker's limiter
 * hook. All of it, and the writing of each line, is under its mutex. n_down is always the
 * number of workers whose last event was a failure: an outage starts when it leaves 0 and
 * ends when it is back at 0, and writes at most one line per kind (unreachable, error) and
 * one at its end (if log_back). It never calls into a limiter. */
#include "proxy/store_log.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/log.h"
#include "store/clock.h"

struct store_log_worker {
    struct store_log *log;
    bool down;                     /* its last event was not OK */
};

struct store_log {
    pthread_mutex_t lock;          /* guards what follows, and the order of the lines */
    bool log_back;
    size_t n_down;                 /* workers whose store is unreachable or failing */
    int64_t down_since_ms;         /* mono: when the first of them went */
    uint64_t events;               /* failed checks and connections since then */
    bool said_unreachable;         /* this outage's lines written so far */
    bool said_error;
    size_t n_workers;
    struct store_log_worker workers[];
};

struct store_log *store_log_create(size_t workers, bool log_back)
{
    struct store_log *log = calloc(1, sizeof(*log) + workers * sizeof(log->workers[0]));
    if (log == NULL)
        return NULL;
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
    pthread_mutex_destroy(&log->lock);
    free(log);
}

void *store_log_hook_arg(struct store_log *log, size_t index)
{
    return index < log->n_workers ? &log->workers[index] : NULL;
}

/* "store unreachable: <reason>" or "store error: <reason>". */
static void write_gone(enum limiter_health health, const char *reason)
{
    const char *word = health == LIMITER_HEALTH_ERROR ? "error" : "unreachable";
    char msg[320];
    snprintf(msg, sizeof(msg), "store %s: %s", word, reason);
    json_t *line = log_line_start("error", msg);
    if (line == NULL)
        return;
    json_object_set_new(line, "store", json_string(word));
    json_object_set_new(line, "store_error", json_string(reason));
    log_line_write(line);
}

static void write_back(int64_t away_ms, uint64_t events)
{
    char msg[96];
    snprintf(msg, sizeof(msg), "store back after %.1f s", (double)away_ms / 1000.0);
    json_t *line = log_line_start("info", msg);
    if (line == NULL)
        return;
    json_object_set_new(line, "store", json_string("ok"));
    json_object_set_new(line, "away_ms", json_integer((json_int_t)away_ms));
    json_object_set_new(line, "count", json_integer((json_int_t)events));
    log_line_write(line);
}

/* A failure during an outage: its line when it is the outage's first of its kind. Two
 * kinds, as what an operator must do differs: a store gone (start it, mend the network)
 * and a store answering errors (a password, its memory). */
static void note_failure(struct store_log *log, enum limiter_health health, const char *reason)
{
    bool *said = health == LIMITER_HEALTH_ERROR ? &log->said_error : &log->said_unreachable;
    log->events++;
    if (*said)
        return;
    *said = true;
    write_gone(health, reason);
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
            log->said_unreachable = log->said_error = false;
        }
        w->down = true;
        note_failure(log, health, reason);
    }
    pthread_mutex_unlock(&log->lock);
}
