/* A worker's rejection warnings (rejection_log.h). It owns its timer, never the throttle,
 * which the process shares and which keeps the held lines. armed_for is when the timer
 * fires, -1 when unarmed; a rejection only ever moves it earlier, so every held line has a
 * timer at or before its time. A held line is a fixed-size copy (struct rejection_line)
 * that points at nothing of the request but limit_type, a static string. Used from its
 * worker's loop thread only. */
#include "proxy/rejection_log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <jansson.h>

#include "proxy/log.h"
#include "proxy/log_throttle.h"
#include "store/catalog/catalog.h"
#include "store/clock.h"

/* user (CATALOG_USER_ID_MAX), limit type and id, with room to spare */
#define REJECTION_KEY_MAX 256

struct rejection_log {
    struct log_throttle *throttle;
    struct event *timer;
    int64_t armed_for;   /* mono ms the timer fires at; -1: not armed */
};

/* What a held line says: the latest rejection's values. */
struct rejection_line {
    int64_t current_count;
    int64_t limit;
    const char *limit_type;
    char user[CATALOG_USER_ID_MAX + 1];
    char plan[CATALOG_NAME_MAX + 1];
};
_Static_assert(sizeof(struct rejection_line) <= LOG_THROTTLE_LINE_MAX, "a held line fits the throttle");

static json_t *str_or_null(const char *s)
{
    return s != NULL ? json_string(s) : json_null();
}

static void write_line(const char *user, const char *plan, const char *limit_type, int64_t current_count,
                       int64_t limit, uint64_t rejections)
{
    json_t *o = log_line_start("warn", "limit exceeded");
    if (o == NULL)
        return;
    json_object_set_new(o, "user_id", str_or_null(user));
    json_object_set_new(o, "plan", str_or_null(plan));
    json_object_set_new(o, "limit_type", json_string(limit_type));
    json_object_set_new(o, "current_count", json_integer(current_count));
    json_object_set_new(o, "limit", json_integer(limit));
    json_object_set_new(o, "rejections", json_integer((json_int_t)rejections));
    log_line_write(o);
}

static void write_held(void *arg, const void *line, size_t line_len, uint64_t count)
{
    (void)arg;
    struct rejection_line l;
    if (line == NULL || line_len != sizeof(l))
        return;
    memcpy(&l, line, sizeof(l));
    write_line(l.user[0] != '\0' ? l.user : NULL, l.plan[0] != '\0' ? l.plan : NULL, l.limit_type, l.current_count,
               l.limit, count);
}

static void arm(struct rejection_log *rl, int64_t at_ms, int64_t now_ms)
{
    int64_t wait = at_ms > now_ms ? at_ms - now_ms : 0;
    struct timeval tv = { .tv_sec = (time_t)(wait / 1000), .tv_usec = (suseconds_t)(wait % 1000) * 1000 };
    if (evtimer_add(rl->timer, &tv) == 0)
        rl->armed_for = at_ms;
}

/* Writes the held lines that are due, then waits for the next one (which another worker's
 * rejection may have made: whichever timer comes first writes it). */
static void on_timer(evutil_socket_t fd, short what, void *arg)
{
    struct rejection_log *rl = arg;
    (void)fd;
    (void)what;
    rl->armed_for = -1;
    int64_t now = store_mono_ms();
    int64_t next = log_throttle_flush(rl->throttle, now, write_held, NULL);
    if (next >= 0)
        arm(rl, next, now);
}

struct rejection_log *rejection_log_create(struct event_base *base, struct log_throttle *throttle)
{
    struct rejection_log *rl = calloc(1, sizeof(*rl));
    if (rl == NULL)
        return NULL;
    rl->throttle = throttle;
    rl->armed_for = -1;
    rl->timer = evtimer_new(base, on_timer, rl);
    if (rl->timer == NULL) {
        free(rl);
        return NULL;
    }
    return rl;
}

void rejection_log_destroy(struct rejection_log *rl)
{
    if (rl == NULL)
        return;
    event_free(rl->timer);
    free(rl);
}

void log_rejection(struct rejection_log *rl, const char *user, const char *plan, const char *limit_type,
                   int64_t limit_id, int64_t current_count, int64_t limit)
{
    /* One budget per user and limit; the type too, since one concurrency limit rejects
     * both requests and WebSocket handshakes. */
    char key[REJECTION_KEY_MAX];
    int keylen = snprintf(key, sizeof(key), "%s%c%s%c%lld", user != NULL ? user : "", 0, limit_type, 0,
                          (long long)limit_id);
    if (keylen < 0)
        return;
    uint64_t rejections = 1;
    if (rl != NULL) {
        struct rejection_line l = { .current_count = current_count, .limit = limit, .limit_type = limit_type };
        snprintf(l.user, sizeof(l.user), "%s", user != NULL ? user : "");
        snprintf(l.plan, sizeof(l.plan), "%s", plan != NULL ? plan : "");
        int64_t now = store_mono_ms(), flush_at = -1;
        if (!log_throttle_hit(rl->throttle, key, (size_t)keylen < sizeof(key) ? (size_t)keylen : sizeof(key) - 1,
                              now, &l, sizeof(l), &rejections, &flush_at)) {
            if (flush_at >= 0 && (rl->armed_for < 0 || flush_at < rl->armed_for))
                arm(rl, flush_at, now);
            return;
        }
    }
    write_line(user, plan, limit_type, current_count, limit, rejections);
}

void rejection_log_flush_all(struct log_throttle *throttle)
{
    if (throttle != NULL)
        log_throttle_flush(throttle, INT64_MAX, write_held, NULL);
}
