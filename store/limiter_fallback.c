/* The local fallback (SPEC "Beyond per-window rates", on_store_error = local): a limiter
 * over two, Redis (primary) and a memory limiter (local), which decides locally what Redis
 * could not. Redis up, a check is primary's own, its denial cache included: one EVALSHA,
 * nothing more but a copy of the arguments kept for the fallback (a hung Redis answers
 * late, when the caller's arguments may be gone). Redis down (refused at once, or cut by
 * its command timeout), the kinds set to local are checked in the memory store, on rules
 * scaled by local_share. When Redis answers again, checks are primary's again.
 *
 * Leases: a check allowed by primary holds its lease there, one allowed locally holds it in
 * the memory store; a release goes to both (only the holder finds the lease id). A local
 * concurrency rule counts the leases still held in primary for that subject and rule, so
 * requests admitted before the outage and still running keep their slots in the count. */
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
    /* the local check: which rule each local rule is, and the primary's leases it counted */
    size_t local_of[LIMITER_MAX_RULES];
    int64_t held[LIMITER_MAX_RULES];
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
    for (size_t j = 0; j < local->n; j++) {
        size_t i = c->local_of[j];
        res.verdicts[i] = local->verdicts[j];
        res.verdicts[i].limit += c->held[j];   /* the local limit as scaled, primary's leases within it */
    }
    if (local->status != LIMITER_DECIDED)
        limiter_result_unavailable(&res, c->n);
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
        int64_t held = 0;
        if (r.kind == LIMIT_CONCURRENCY) {
            int64_t slots = scaled(r.rate, share, 1);
            held = (int64_t)limiter_lease_group_count(fl->primary, c->subject, c->subject_len, r.id);
            if (held >= slots) {
                /* primary's own running requests fill the local share: refused here */
                struct limiter_result res;
                memset(&res, 0, sizeof(res));
                res.status = LIMITER_DECIDED;
                res.local = true;
                res.now_ms = -1;
                res.n = c->n;
                for (size_t k = 0; k < c->n; k++)
                    res.verdicts[k] = (struct limit_verdict){ .allowed = true,
                                                              .limit = c->rules[k].rate + c->rules[k].burst,
                                                              .remaining = c->rules[k].rate + c->rules[k].burst };
                res.verdicts[i] = (struct limit_verdict){ .allowed = false, .limit = slots, .remaining = 0,
                                                          .reset_ms = 1000 };
                finish(c, &res);
                return;
            }
            r.rate = slots - held;
            concurrency |= (uint32_t)1 << m;
        } else {
            r.burst = scaled(r.burst, share, 0);
            /* a request of this rule's cost must still fit the scaled limit */
            int64_t need = limit_rule_cost(&r) - r.burst;
            r.rate = scaled(r.rate, share, need > 1 ? need : 1);
        }
        c->local_of[m] = i;
        c->held[m] = held;
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
    if (result->status == LIMITER_DECIDED || c->fl->destroying)
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
    if (!any_local(&fl->options))
        return limiter_check_checked(fl->primary, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len,
                                     concurrency, done, arg);
    struct fallback_check *c = check_get(fl);
    if (c == NULL)
        return -ENOMEM;
    c->fl = fl;
    c->done = done;
    c->arg = arg;
    c->n = n;
    memcpy(c->rules, rules, n * sizeof(*rules));
    c->subject_len = subject_len;
    memcpy(c->subject, subject, subject_len);
    c->lease_id_len = lease_id != NULL ? lease_id_len : 0;
    if (lease_id != NULL)
        memcpy(c->lease_id, lease_id, lease_id_len);
    int r = limiter_check_checked(fl->primary, subject, subject_len, rules, n, now_ms, lease_id, lease_id_len,
                                  concurrency, on_primary, c);
    if (r != 0)
        check_put(fl, c);
    return r;
}

static void fallback_release_request(struct limiter *limiter, const char *subject, size_t subject_len,
                                     const struct limit_rule *rules, size_t n, const char *lease_id)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    limiter_release(fl->primary, subject, subject_len, rules, n, lease_id);
    if (limiter_lease_count(fl->local) > 0)
        limiter_release(fl->local, subject, subject_len, rules, n, lease_id);
}

/* Never called: releases go through fallback_release_request. */
static void fallback_release(struct limiter *limiter, struct lease *lease)
{
    lease_table_remove(&limiter->leases, lease);
}

static void fallback_release_all(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    limiter_release_all(fl->local, NULL, NULL);
    limiter_release_all(fl->primary, done, arg);
}

static void fallback_sync(struct limiter *limiter, void (*done)(void *arg), void *arg)
{
    struct fallback_limiter *fl = (struct fallback_limiter *)limiter;
    if (fl->primary->ops->sync != NULL)
        fl->primary->ops->sync(fl->primary, done, arg);
    else
        done(arg);
}

static bool fallback_available(const struct limiter *limiter)
{
    const struct fallback_limiter *fl = (const struct fallback_limiter *)limiter;
    return limiter_available(fl->primary);
}

static size_t fallback_lease_count(const struct limiter *limiter)
{
    const struct fallback_limiter *fl = (const struct fallback_limiter *)limiter;
    return limiter_lease_count(fl->primary) + limiter_lease_count(fl->local);
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

static size_t fallback_nodes(const struct limiter *limiter,
                             void (*fn)(void *arg, const struct limiter_node_info *node), void *arg)
{
    return limiter_nodes(((const struct fallback_limiter *)limiter)->primary, fn, arg);
}

static const struct limiter_ops fallback_ops = {
    .check = fallback_check,
    .peek = fallback_peek,
    .destroy = fallback_destroy,
    .available = fallback_available,
    .release = fallback_release,
    .release_all = fallback_release_all,
    .sync = fallback_sync,
    .composite = true,
    .release_request = fallback_release_request,
    .lease_count = fallback_lease_count,
    .nodes = fallback_nodes,
};

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
    fl->primary = primary;
    fl->local = local;
    fl->options = *options;
    return &fl->base;
}

void limiter_local_fallback_set(struct limiter *limiter, const struct local_fallback_options *options)
{
    if (limiter == NULL || limiter->ops != &fallback_ops || !options_valid(options))
        return;
    ((struct fallback_limiter *)limiter)->options = *options;
}
