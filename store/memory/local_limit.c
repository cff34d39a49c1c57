/* One rule for one subject, unlocked (see local_limit.h): an algo_state driven by the same
 * functions as the memory store, so a --ws-messages limit counts exactly as a rate rule. */
#include "store/memory/local_limit.h"

#include <stdlib.h>

#include "store/memory/algorithms.h"

struct local_limit {
    struct algo_state st;
};

struct local_limit *local_limit_create(void)
{
    struct local_limit *l = malloc(sizeof(*l));
    if (l != NULL)
        algo_state_init(&l->st);
    return l;
}

void local_limit_destroy(struct local_limit *l)
{
    if (l == NULL)
        return;
    algo_state_clear(&l->st);
    free(l);
}

bool local_limit_check(struct local_limit *l, const struct limit_rule *rule, int64_t now_ms, struct limit_verdict *v)
{
    struct limit_verdict ignored;
    if (v == NULL)
        v = &ignored;
    if (l == NULL || limit_rule_validate(rule) != 0 || rule->kind == LIMIT_CONCURRENCY) {
        *v = (struct limit_verdict){.allowed = false};
        return false;
    }
    struct algo_eval ev;
    algo_decide(&l->st, rule, now_ms, &ev);
    /* Out of memory growing a sliding log: the event passes, uncounted, rather than
     * closing a connection for the proxy's own failure. */
    if (ev.allowed && algo_reserve(&l->st, rule, &ev) == 0)
        algo_commit(&l->st, rule, &ev);
    algo_verdict(&l->st, rule, &ev, v);
    return ev.allowed;
}
