#include "proxy/log_throttle.h"

#include <pthread.h>
#include <stdlib.h>

#include "store/keyed_hash.h"

/* Keys per set: a new key evicts within its set only, so a lookup reads one cache line
 * or two and the table never grows. */
#define WAYS 8

struct throttle_entry {
    uint64_t hash;         /* 0: empty */
    int64_t last_line_ms;  /* when the key's last line was written */
    uint64_t held;         /* events held back since then */
};

struct log_throttle {
    pthread_mutex_t lock;
    int64_t interval_ms;
    size_t set_mask;       /* number of sets - 1 */
    struct throttle_entry *entries; /* (set_mask + 1) * WAYS */
};

struct log_throttle *log_throttle_create(size_t capacity, int64_t interval_ms)
{
    size_t sets = 1;
    while (sets * WAYS < capacity && sets < ((size_t)1 << 24))
        sets <<= 1;
    struct log_throttle *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return NULL;
    t->entries = calloc(sets * WAYS, sizeof(*t->entries));
    if (t->entries == NULL) {
        free(t);
        return NULL;
    }
    pthread_mutex_init(&t->lock, NULL);
    t->interval_ms = interval_ms;
    t->set_mask = sets - 1;
    return t;
}

void log_throttle_destroy(struct log_throttle *t)
{
    if (t == NULL)
        return;
    pthread_mutex_destroy(&t->lock);
    free(t->entries);
    free(t);
}

bool log_throttle_hit(struct log_throttle *t, const void *key, size_t len, int64_t now_ms, uint64_t *pcount)
{
    uint64_t h = hash_keyed(key, len);   /* keys name users and clients */
    if (h == 0)
        h = 1; /* 0 marks an empty entry */
    pthread_mutex_lock(&t->lock);
    struct throttle_entry *set = &t->entries[(h >> 8 & t->set_mask) * WAYS];
    struct throttle_entry *e = NULL, *victim = &set[0];
    for (size_t i = 0; i < WAYS; i++) {
        if (set[i].hash == h) {
            e = &set[i];
            break;
        }
        /* an empty entry first, else the one whose last line is oldest */
        if (victim->hash != 0 && (set[i].hash == 0 || set[i].last_line_ms < victim->last_line_ms))
            victim = &set[i];
    }
    bool due;
    if (e == NULL) {
        *victim = (struct throttle_entry){ .hash = h, .last_line_ms = now_ms, .held = 0 };
        *pcount = 1;
        due = true;
    } else if (now_ms - e->last_line_ms >= t->interval_ms) {
        *pcount = e->held + 1;
        e->held = 0;
        e->last_line_ms = now_ms;
        due = true;
    } else {
        e->held++;
        due = false;
    }
    pthread_mutex_unlock(&t->lock);
    return due;
}
