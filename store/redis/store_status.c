/* The record of what a limiter last met of its store (store_status.h). It owns the struct's
 * reason and health; the hook is the limiter's. health is atomic and reason is under the
 * mutex, so any thread may read them while the limiter's thread writes. The hook is called
 * outside the mutex, with a copy of the reason, so a slow hook holds up no reader. A reason
 * is one line (CR and LF become spaces) and names the store and the step. store_status_ok
 * tells the hook only on a change from a failure. */
#include "store/redis/store_status.h"

#include <stdio.h>
#include <string.h>

void store_status_init(struct store_status *s, const char *where)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->lock, NULL);
    atomic_init(&s->health, LIMITER_HEALTH_OK);
    snprintf(s->where, sizeof(s->where), "%s", where);
}

void store_status_destroy(struct store_status *s)
{
    pthread_mutex_destroy(&s->lock);
}

/* Tells the hook, with the reason as it stands (a copy: the hook may run long). */
static void tell(struct store_status *s, enum limiter_health health)
{
    if (s->hook == NULL)
        return;
    char reason[STORE_REASON_MAX];
    pthread_mutex_lock(&s->lock);
    memcpy(reason, s->reason, sizeof(reason));
    pthread_mutex_unlock(&s->lock);
    s->hook(s->hook_arg, health, reason);
}

void store_status_fail(struct store_status *s, enum limiter_health health, const char *what, const char *detail)
{
    char reason[STORE_REASON_MAX];
    /* one line: an error reply may hold a line end (a script error's traceback) */
    snprintf(reason, sizeof(reason), "%s: %s: %s", s->where, what, detail != NULL ? detail : "?");
    for (char *c = reason; *c != '\0'; c++)
        if (*c == '\r' || *c == '\n')
            *c = ' ';
    pthread_mutex_lock(&s->lock);
    memcpy(s->reason, reason, sizeof(reason));
    pthread_mutex_unlock(&s->lock);
    atomic_store(&s->health, health);
    tell(s, health);
}

void store_status_repeat(struct store_status *s)
{
    enum limiter_health health = atomic_load_explicit(&s->health, memory_order_relaxed);
    if (health != LIMITER_HEALTH_OK)
        tell(s, health);
}

void store_status_ok(struct store_status *s)
{
    if (atomic_load_explicit(&s->health, memory_order_relaxed) == LIMITER_HEALTH_OK)
        return;
    atomic_store(&s->health, LIMITER_HEALTH_OK);
    tell(s, LIMITER_HEALTH_OK);
}

enum limiter_health store_status_get(struct store_status *s, char *reason, size_t len)
{
    enum limiter_health health = atomic_load(&s->health);
    if (len > 0) {
        pthread_mutex_lock(&s->lock);
        snprintf(reason, len, "%s", health == LIMITER_HEALTH_OK ? "" : s->reason);
        pthread_mutex_unlock(&s->lock);
    }
    return health;
}
