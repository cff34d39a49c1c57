/* The arithmetic of each rule kind (the four rate algorithms, and concurrency below) as
 * pure integer functions of (state, rule, now), used by the memory store and
 * store/memory/local_limit.c. check.lua does the same arithmetic for the Redis store on a layout
 * of its own (see algorithms.c). Private to store/.
 *
 * A check decides every rule before it records any, so that several rules are decided
 * atomically:
 *   algo_decide()  reads the state and says whether this rule allows the request;
 *   algo_reserve() makes sure the commit cannot fail (grows a sliding log's ring);
 *   algo_commit()  records the request (only when every rule of the check allowed it);
 *   algo_verdict() turns the evaluation into the verdict the caller sees.
 * All times are integer ms; C = rate + burst; k = the request's cost (limit_rule_cost); a
 * clock that goes backwards is clamped to the state's newest time. A request of cost k is
 * allowed when k requests of cost 1 at the same instant would all be, and recorded as k
 * units. The verdict describes the state after the check, in units:
 *   remaining = units that could still be admitted right now (0 when rejected);
 *   reset_ms  = ms until `remaining` goes up by one with no other traffic (for a rejected
 *               request: until a request of cost k would be allowed), 0 when nothing is
 *               in use.
 *
 * LIMIT_QUOTA: the units used in the current calendar period (limit_period_start_ms);
 * another period's count is read as 0. Verdict as limit.h says.
 *
 * LIMIT_CONCURRENCY is here too, for the memory store: its state is the number of leases
 * held (no clock, no TTL: one process knows when its leases end), a commit takes one and
 * algo_release gives one back. Verdict: remaining = rate - held, reset_ms = 1000 when
 * rejected, else 0 (when a slot frees is unknowable). */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "store/limit.h"

/* Per (subject, rule) state. `kind` (an enum limit_kind) < 0 means empty. Only the
 * sliding log owns memory. */
struct algo_state {
    int kind;
    int64_t window_ms;   /* tag: the state is reused only under the same kind and, but for the
                          * sliding log and concurrency, the same window (a quota: the same
                          * period, an enum limit_period) */
    union {
        struct { int64_t w, n; } fw;              /* window index, count in it */
        struct { int64_t w, cur, prev; } sw;      /* window index, its count, previous count */
        struct { int64_t level, t; } tb;          /* tokens * window_ms, time of `level` */
        struct {                                  /* admitted requests, oldest first */
            int64_t *ts;                          /* ring of times; cap is 0 or a power of two;
                                                   * weighted: followed by cap + 1 running totals */
            uint32_t head, len, cap;
            uint32_t weighted;                    /* some entry weighs more than 1 */
        } sl;
        struct { int64_t held; } cc;              /* leases held */
        struct { int64_t start, used; } q;        /* period start (Unix ms), units used in it */
    } u;
};

/* What algo_decide found; consumed by algo_commit and algo_verdict. */
struct algo_eval {
    bool allowed;
    bool stale;          /* the state belongs to another kind or window: treated as empty */
    int64_t te;          /* now, clamped to the state's newest time */
    int64_t a, b, c;     /* kind-specific (see algorithms.c) */
};

void algo_state_init(struct algo_state *s);
/* Frees what the state owns and makes it empty. */
void algo_state_clear(struct algo_state *s);

/* Decides one rule. Does not modify the state. */
void algo_decide(const struct algo_state *s, const struct limit_rule *rule, int64_t now, struct algo_eval *ev);

/* Makes sure algo_commit cannot fail (grows the sliding-log ring, drops a stale state).
 * Changes no decision; may renumber ev. Returns 0 or -ENOMEM. */
int algo_reserve(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev);

/* Records the allowed request in the state; ev must come from algo_decide on the same state,
 * with ev->allowed, followed by a successful algo_reserve. Updates ev for algo_verdict. */
void algo_commit(struct algo_state *s, const struct limit_rule *rule, struct algo_eval *ev);

/* Fills the verdict from ev (and the state, for the sliding log). */
void algo_verdict(const struct algo_state *s, const struct limit_rule *rule, const struct algo_eval *ev,
                  struct limit_verdict *v);

/* The time from which the state is equivalent to an empty one (INT64_MIN when empty;
 * INT64_MAX for a concurrency state that holds leases: it only empties by algo_release). */
int64_t algo_dead_ms(const struct algo_state *s, const struct limit_rule *rule);

/* Gives back one lease of a concurrency state. Returns true when one was held (a state of
 * another kind, or one with none held, is left alone). */
bool algo_release(struct algo_state *s);
