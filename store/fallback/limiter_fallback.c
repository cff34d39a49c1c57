/* The local fallback (SPEC "Beyond per-window rates", on_store_error = local): a limiter
 * over two, Redis (primary) and a memory limiter (local), which decides locally what Redis
 * could not. Redis up, a check is primary's own, its denial cache included: one EVALSHA,
 * nothing more but a copy of the arguments kept for the fallback (a hung Redis answers
 * late, when the caller's arguments may be gone). Redis down (refused at once, or cut by
 * its command timeout, or answering errors), the kinds set to local are checked in the
 * memory store, on rules scaled by local_share. When Redis answers again, checks are
 * primary's again.
 *
 * Leases (SPEC "Faults keep their promises"): the memory store, one per process, counts
 * every lease of the process, wherever it was taken. A check allowed by primary holds its
 * lease there and a copy of it in the memory store (taken without a limit); one allowed
 * locally holds it in the memory store only. So a local concurrency rule counts the
 * process's running requests, whichever worker admitted them and whether Redis did or the
 * fallback: one proxy never admits more than its share, however many workers it has. A
 * check sent to Redis tells it (rule.held) how many leases of that subject and rule the
 * process holds: a Redis that lost them (flushed, restarted empty) counts those, and the
 * limiter puts them back. A lease taken locally becomes primary's (limiter_lease_adopt):
 * at once when primary's connection is up (Redis answered an error, or its concurrency
 * checks wait after a reconnect), else when it is ready again, before it renews what it
 * holds; either way its registration goes out before any check primary sends after it, so
 * Redis counts it from the first check it decides. A release goes to both (only a holder
 * finds the lease id). */
#include "store/limiter_impl.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Check contexts kept for reuse, per limiter (one thread): no malloc per request. */
#define SPARE_CHECKS 256

struct fallback_check {
    struct fallback_check *next;
    struct fallback_limiter *fl;
    limiter_done_fn *done;
    void *arg;
    size_t n, subject_len, lease_id_len;
    struct limit_rule rules[LIMITER_MAX_RULES];
    uint32_t concurrency;    /* bit i: rules[i] is a concurrency rule */
    size_t local_of[LIMITER_MAX_RULES];   /* the local check: which rule each local rule is */
    char lease_id[LEASE_ID_MAX];
    char subject[LIMITER_MAX_SUBJECT];
};

struct fallback_limiter {
    struct limiter base;
    struct limiter *primary, *local;
    struct local_fallback_options options;
    bool destroying;
    struct fallback_check *spare;
    size_t n_spare;
};

static const struct limiter_ops fallback_ops;

static bool any_local(const struct local_fallback_options *o)
{
    return o->rate == LIMITER_STORE_ERROR_LOCAL || o->concurrency == LIMITER_STORE_ERROR_LOCAL;
}

static struct fallback_check *check_get(struct fallback_limiter *fl)
{
    struct fallback_check *c = fl->spare;
    if (c != NULL) {
        fl->spare = c->next;
        fl->n_spare--;
        return c;
    }
    return malloc(sizeof(*c));
}

static void check_put(struct fallback_limiter *fl, struct fallback_check *c)
{
    if (fl->n_spare >= SPARE_CHECKS || fl->destroying) {
        free(c);
        return;
    }
    c->next = fl->spare;
    fl->spare = c;
    fl->n_spare++;
}

/* Hands result to the caller and recycles c first (done may check again at once). */
static void finish(struct fallback_check *c, const struct limiter_result *result)
{
    limiter_done_fn *done = c->done;
    void *arg = c->arg;
    check_put(c->fl, c);
    done(arg, result);
}

/* limit x share, floored (a hair of slack for 0.3 * 10 and the like), at least `floor_at`. */
static int64_t scaled(int64_t limit, double share, int64_t floor_at)
{
    int64_t v = (int64_t)((double)limit * share + 1e-9);   /* >= 0: truncation floors */
    return v < floor_at ? floor_at : v;
}

static enum limiter_store_error mode_of(const struct fallback_limiter *fl, const struct limit_rule *rule)
{
    return rule->kind == LIMIT_CONCURRENCY ? fl->options.concurrency : fl->options.rate;
}

static void ignore_result(void *arg, const struct limiter_result *result)
{
}

/* A slot count no process reaches: the copy of a lease Redis gave is taken whatever the count. */
#define MIRROR_SLOTS ((int64_t)1 << 40)

/* Primary admitted a leased check: its leases are counted in the memory store too. */
static void mirror_leases(struct fallback_check *c)
{
    struct limit_rule conc[LIMITER_MAX_RULES];
    size_t m = 0;
    for (size_t i = 0; i < c->n; i++) {
        if ((c->concurrency >> i & 1) == 0)
            continue;
        conc[m] = c->rules[i];
        conc[m].rate = MIRROR_SLOTS;
        conc[m++].held = 0;
    }
    uint32_t all = m >= 32 ? UINT32_MAX : ((uint32_t)1 << m) - 1;
    /* a failure (no memory) leaves the lease uncounted here: the fallback undercounts by one */
    (void)limiter_check_checked(c->fl->local, c->subject, c->subject_len, conc, m, -1, c->lease_id,
                                c->lease_id_len, all, ignore_result, NULL);
}

/* Leases taken locally while primary's connection is up (it answered with an error, or its
 * concurrency checks wait after a reconnect) become primary's at once: it registers them
 * in Redis before any check it sends after. Those taken while it was down, when it is
 * ready again (on_primary_ready). */
static void register_local_leases(const struct fallback_check *c)
{
    for (size_t i = 0; i < c->n; i++)
        if (c->concurrency >> i & 1)
            (void)limiter_lease_adopt(c->fl->primary, c->subject, c->subject_len, c->rules[i].id,
                                      c->rules[i].window_ms, c->lease_id, c->lease_id_len);
}

/* The memory store's answer, for the local rules, made into one for every rule. */
static void on_local(void *arg, const struct limiter_result *local)
{
    struct fallback_check *c = arg;
    struct limiter_result res;
    memset(&res, 0, sizeof(res));
    res.status = local->status;
    res.allowed = local->allowed;
    res.now_ms = local->now_ms;
    res.remembered = local->remembered;
    res.local = local->status == LIMITER_DECIDED;
    res.n = c->n;
    /* a rule left open is not limited: an allowed verdict of its full limit */
    for (size_t i = 0; i < c->n; i++)
        res.verdicts[i] = (struct limit_verdict){ .allowed = true, .limit = c->rules[i].rate + c->rules[i].burst,
                                                  .remaining = c->rules[i].rate + c->rules[i].burst };
    for (size_t j = 0; j < local->n; j++)
        res.verdicts[c->local_of[j]] = local->verdicts[j];
    if (local->status != LIMITER_DECIDED)
        limiter_result_unavailable(&res, c->n);
    else if (local->allowed && c->concurrency != 0 && limiter_available(c->fl->primary))
        register_local_leases(c);
    finish(c, &res);
}

/* primary could not decide: the local rules in the memory store, or UNAVAILABLE passed on. */
static void decide_locally(struct fallback_check *c, const struct limiter_result *unavailable)
{
    struct fallback_limiter *fl = c->fl;
    const double share = fl->options.share;
    struct limit_rule local_rules[LIMITER_MAX_RULES];
    size_t m = 0;
    uint32_t concurrency = 0;
    for (size_t i = 0; i < c->n; i++) {
        enum limiter_store_error mode = mode_of(fl, &c->rules[i]);
        if (mode == LIMITER_STORE_ERROR_CLOSED) {
            finish(c, unavailable);
            return;
        }
        if (mode != LIMITER_STORE_ERROR_LOCAL)
            continue;
        struct limit_rule r = c->rules[i];
        if (r.kind == LIMIT_CONCURRENCY) {
            /* the memory store holds every lease of the process, Redis's copies included */
            r.rate = scaled(r.rate, share, 1);
            concurrency |= (uint32_t)1 << m;
        } else {
            r.burst = scaled(r.burst, share, 0);
            /* a request of this rule's cost must still fit the scaled limit */
            int64_t need = limit_rule_cost(&r) - r.burst;
            r.rate = scaled(r.rate, share, need > 1 ? need : 1);
        }
        c->local_of[m] = i;
        local_rules[m++] = r;
    }
    if (m == 0) {
        finish(c, unavailable);
        return;
    }
    const char *lease_id = concurrency != 0 ? c->lease_id : NULL;
    int r = limiter_check_checked(fl->local, c->subject, c->subject_len, local_rules, m, -1, lease_id,
                                  concurrency != 0 ? c->lease_id_len : 0, concurrency, on_local, c);
    if (r != 0)
        finish(c, unavailable);
}

static void on_primary(void *arg, const struct limiter_result *result)
{
    struct fallback_check *c = arg;
    if (result->status == LIMITER_DECIDED && result->allowed && c->concurrency != 0 && !c->fl->destroying)
        mirror_leases(c);
    if (result->status == LIMITER_DECIDED || c->fl->destroying || !any_local(&c->fl->options))
        finish(c, result);
    else
        decide_locally(c, result);
}

static int fallback_check(struct limiter *limiter, const char *subject, size_t subject_len,
                          const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                          size_t lease_id_len, limiter_done_fn *done, void *arg)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    uint32_t concurrency = 0;
    for (size_t i = 0; i < n; i++) {
        if (rules[i].kind != LIMIT_CONCURRENCY)
            continue;
        concurrency |= (uint32_t)1 << i;
        /* limiter.c looked in this limiter's own (empty) table: a lease id its parts hold
           already is refused as it would be by either alone */
        if (lease_table_find(&fl->primary->leases, subject, subject_len, rules[i].id, lease_id, lease_id_len) ||
            lease_table_find(&fl->local->leases, subject, subject_len, rules[i].id, lease_id, lease_id_len))
            return -EINVAL;
    }
    if (!any_local(&fl->options) && concurrency == 0)
        return limiter_check_checked(fl->primary, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len,
                                     concurrency, done, arg);
    struct fallback_check *c = check_get(fl);
    if (c == NULL)
        return -ENOMEM;
    c->fl = fl;
    c->done = done;
    c->arg = arg;
    c->n = n;
    c->concurrency = concurrency;
    memcpy(c->rules, rules, n * sizeof(*rules));
    for (size_t i = 0; i < n; i++)   /* what Redis must count at least */
        if (concurrency >> i & 1)
            c->rules[i].held = (int64_t)limiter_memory_held(fl->local, subject, subject_len, rules[i].id);
    c->subject_len = subject_len;
    memcpy(c->subject, subject, subject_len);
    c->lease_id_len = lease_id != NULL ? lease_id_len : 0;
    if (lease_id != NULL)
        memcpy(c->lease_id, lease_id, lease_id_len);
    int r = limiter_check_checked(fl->primary, subject, subject_len, c->rules, n, now_ms, lease_id, lease_id_len,
                                  concurrency, on_primary, c);
    if (r != 0)
        check_put(fl, c);
    return r;
}

static void fallback_release(struct limiter *limiter, const char *subject, size_t subject_len,
                             const struct limit_rule *rules, size_t n, const char *lease_id, size_t lease_id_len)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    fl->primary->ops->release(fl->primary, subject, subject_len, rules, n, lease_id, lease_id_len);
    if (limiter_lease_count(fl->local) > 0)
        fl->local->ops->release(fl->local, subject, subject_len, rules, n, lease_id, lease_id_len);
}

static void fallback_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    limiter_release_all(fl->local, NULL, NULL);
    limiter_release_all(fl->primary, done, arg);
}

/* primary's connection is ready again: the leases taken locally while it was away become
 * its own, so that the renewal it sends now registers them in Redis. */
static void on_primary_ready(void *arg)
{
    struct fallback_limiter *fl = arg;
    for (struct lease_group *g = fl->local->leases.groups; g != NULL; g = g->next)
        for (struct lease *l = g->first; l != NULL; l = l->next)
            (void)limiter_lease_adopt(fl->primary, g->subject, g->subject_len, g->rule_id, g->ttl_ms, l->id,
                                      l->id_len);   /* -EEXIST: a copy of one of primary's */
}

static size_t fallback_lease_count(const struct limiter *limiter)
{
    const struct fallback_limiter *fl = (const struct fallback_limiter *)limiter;
    /* local holds a copy of each of primary's (unless it had no memory for one) */
    size_t primary = limiter_lease_count(fl->primary), local = limiter_lease_count(fl->local);
    return local > primary ? local : primary;
}

static void fallback_destroy(struct limiter *limiter)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    fl->destroying = true;   /* checks failed by primary's end are passed on as they are */
    limiter_destroy(fl->primary);
    limiter_destroy(fl->local);
    while (fl->spare != NULL) {
        struct fallback_check *c = fl->spare;
        fl->spare = c->next;
        free(c);
    }
    free(fl);
}

/* usage reads the shared state: the primary's. */
static int fallback_peek(struct limiter *limiter, const char *subject, size_t subject_len,
                         const struct limit_rule *rules, size_t n, int64_t now_ms, limiter_done_fn *done, void *arg)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    return fl->primary->ops->peek(fl->primary, subject, subject_len, rules, n, now_ms, done, arg);
}

/* A wrapper: no shared slots of its own; limiter.c sends those calls to primary (inner). */
static const struct limiter_ops fallback_ops = LIMITER_OPS(fallback, fallback_lease_count, NULL);

static bool options_valid(const struct local_fallback_options *o)
{
    return o != NULL && o->share > 0.0 && o->share <= 1.0;
}

struct limiter *limiter_local_fallback_create(struct limiter *primary, struct limiter *local,
                                              const struct local_fallback_options *options)
{
    struct fallback_limiter *fl = NULL;
    if (primary != NULL && local != NULL && options_valid(options))
        fl = calloc(1, sizeof(*fl));
    if (fl == NULL) {
        limiter_destroy(primary);
        limiter_destroy(local);
        return NULL;
    }
    fl->base.ops = &fallback_ops;
    lease_table_init(&fl->base.leases);
    fl->base.inner = primary;
    fl->primary = primary;
    fl->local = local;
    fl->options = *options;
    limiter_set_ready_hook(primary, on_primary_ready, fl);
    return &fl->base;
}

void limiter_local_fallback_set(struct limiter *limiter, const struct local_fallback_options *options)
{
    if (limiter == NULL || limiter->ops != &fallback_ops || !options_valid(options))
        return;
    ((struct fallback_limiter *)limiter)->options = *options;
}
