/* The log throttle (log_throttle.h). It owns the table (sets of WAYS entries, never grown)
 * and each entry's held line. All is under one mutex, and lines are written outside it
 * after being taken off the table. An entry is on the held list exactly when held > 0, the
 * list in order of flush_ms (never due before its tail), so a flush reads from the head.
 * Hash 0 marks an empty entry (a key hashing to 0 is stored as 1). A line buffer has one
 * owner at a time, its entry or the flush that took it, and is freed once. */
#include "proxy/log_throttle.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "store/keyed_hash.h"

/* Keys per set: a new key evicts within its set only, so a lookup reads one cache line
 * or two and the table never grows. */
#define WAYS 8
/* Held lines written per pass of log_throttle_flush outside the lock. */
#define FLUSH_BATCH 32

/* Links of the held list are entry indexes + 1; 0 ends the list. */
typedef uint32_t link_t;

struct throttle_entry {
    uint64_t hash;         /* 0: empty */
    int64_t last_line_ms;  /* when the key's last line was written */
    uint64_t held;         /* events held back since then */
    int64_t flush_ms;      /* held > 0: when the held line is due */
    link_t prev, next;     /* held > 0: the held list, in order of flush_ms */
    char *line;            /* held > 0: what the held line says (malloc'd) */
    size_t line_len;
};

struct log_throttle {
    pthread_mutex_t lock;
    int64_t interval_ms;
    size_t set_mask;       /* number of sets - 1 */
    struct throttle_entry *entries; /* (set_mask + 1) * WAYS */
    link_t held_head, held_tail;    /* keys with a held line, the first due first */
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
    for (size_t i = 0; i < (t->set_mask + 1) * WAYS; i++)
        free(t->entries[i].line);
    pthread_mutex_destroy(&t->lock);
    free(t->entries);
    free(t);
}

static struct throttle_entry *entry_at(struct log_throttle *t, link_t link)
{
    return link != 0 ? &t->entries[link - 1] : NULL;
}

static link_t link_of(struct log_throttle *t, const struct throttle_entry *e)
{
    return (link_t)(e - t->entries) + 1;
}

/* Takes e off the held list; its held count and line stay for the caller. */
static void unlink_held(struct log_throttle *t, struct throttle_entry *e)
{
    struct throttle_entry *prev = entry_at(t, e->prev), *next = entry_at(t, e->next);
    if (prev != NULL)
        prev->next = e->next;
    else
        t->held_head = e->next;
    if (next != NULL)
        next->prev = e->prev;
    else
        t->held_tail = e->prev;
    e->prev = e->next = 0;
}

/* e's first held event at now_ms: due one interval later, and never before the list's
 * last (events of several threads reach the lock a little out of order), so the list
 * stays in order of flush_ms. */
static void append_held(struct log_throttle *t, struct throttle_entry *e, int64_t now_ms)
{
    struct throttle_entry *tail = entry_at(t, t->held_tail);
    e->flush_ms = now_ms + t->interval_ms;
    if (tail != NULL && tail->flush_ms > e->flush_ms)
        e->flush_ms = tail->flush_ms;
    e->prev = t->held_tail;
    e->next = 0;
    if (tail != NULL)
        tail->next = link_of(t, e);
    else
        t->held_head = link_of(t, e);
    t->held_tail = link_of(t, e);
}

/* Keeps a copy of line as e's held line; on failure the older line stays. */
static void keep_line(struct throttle_entry *e, const void *line, size_t line_len)
{
    if (line == NULL || line_len == 0 || line_len > LOG_THROTTLE_LINE_MAX)
        return;
    if (e->line == NULL) {
        e->line = malloc(LOG_THROTTLE_LINE_MAX);
        if (e->line == NULL)
            return;
    }
    memcpy(e->line, line, line_len);
    e->line_len = line_len;
}

static void forget(struct log_throttle *t, struct throttle_entry *e)
{
    if (e->held > 0)
        unlink_held(t, e);
    free(e->line);
    *e = (struct throttle_entry){ 0 };
}

/* The entry a new key takes in set: an empty one, else the one whose last line is oldest
 * among those holding nothing, else the oldest. */
static struct throttle_entry *victim_in(struct throttle_entry *set)
{
    struct throttle_entry *victim = NULL;
    for (size_t i = 0; i < WAYS; i++) {
        struct throttle_entry *e = &set[i];
        if (e->hash == 0)
            return e;
        if (victim == NULL || (victim->held > 0 && e->held == 0) ||
            ((victim->held > 0) == (e->held > 0) && e->last_line_ms < victim->last_line_ms))
            victim = e;
    }
    return victim;
}

bool log_throttle_hit(struct log_throttle *t, const void *key, size_t len, int64_t now_ms, const void *line,
                      size_t line_len, uint64_t *pcount, int64_t *pflush_ms)
{
    uint64_t h = hash_keyed(key, len);   /* keys name users and clients */
    if (h == 0)
        h = 1; /* 0 marks an empty entry */
    pthread_mutex_lock(&t->lock);
    struct throttle_entry *set = &t->entries[(h >> 8 & t->set_mask) * WAYS];
    struct throttle_entry *e = NULL;
    for (size_t i = 0; i < WAYS && e == NULL; i++)
        if (set[i].hash == h)
            e = &set[i];
    bool due;
    if (e == NULL) {
        e = victim_in(set);
        forget(t, e);
        *e = (struct throttle_entry){ .hash = h, .last_line_ms = now_ms };
        *pcount = 1;
        due = true;
    } else if (now_ms - e->last_line_ms >= t->interval_ms) {
        *pcount = e->held + 1;
        if (e->held > 0)
            unlink_held(t, e);
        e->held = 0;
        e->last_line_ms = now_ms;
        due = true;
    } else {
        if (e->held++ == 0)
            append_held(t, e, now_ms);
        keep_line(e, line, line_len);
        if (pflush_ms != NULL)
            *pflush_ms = e->flush_ms;
        due = false;
    }
    pthread_mutex_unlock(&t->lock);
    return due;
}

struct held_line {
    char *line;
    size_t line_len;
    uint64_t count;
};

/* Takes up to FLUSH_BATCH held lines due at now_ms off the list into out (their lines
 * now the caller's); returns how many, and the next one's due time in *pnext (-1: none). */
static size_t take_due(struct log_throttle *t, int64_t now_ms, struct held_line *out, int64_t *pnext)
{
    size_t n = 0;
    struct throttle_entry *e;
    while (n < FLUSH_BATCH && (e = entry_at(t, t->held_head)) != NULL && e->flush_ms <= now_ms) {
        unlink_held(t, e);
        out[n++] = (struct held_line){ .line = e->line, .line_len = e->line_len, .count = e->held };
        e->line = NULL;
        e->line_len = 0;
        e->held = 0;
        /* written now; "every one" (INT64_MAX) is the end, when no later event comes */
        e->last_line_ms = now_ms == INT64_MAX ? e->flush_ms : now_ms;
    }
    e = entry_at(t, t->held_head);
    *pnext = e != NULL ? e->flush_ms : -1;
    return n;
}

int64_t log_throttle_flush(struct log_throttle *t, int64_t now_ms, log_throttle_write_fn *write, void *arg)
{
    struct held_line batch[FLUSH_BATCH];
    int64_t next;
    size_t n;
    do {
        pthread_mutex_lock(&t->lock);
        n = take_due(t, now_ms, batch, &next);
        pthread_mutex_unlock(&t->lock);
        for (size_t i = 0; i < n; i++) {
            if (write != NULL)
                write(arg, batch[i].line, batch[i].line_len, batch[i].count);
            free(batch[i].line);
        }
    } while (n == FLUSH_BATCH);
    return next;
}
