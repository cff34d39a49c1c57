/* The process's count of requests in flight to the upstream (upstream_cap.h). One atomic
 * counter for every worker: taking a place is a compare-and-swap that never lets the count
 * pass the taker's threshold, so the upstream never sees more than the cap, under any race. */
#include "proxy/upstream_cap.h"

bool upstream_cap_admits(int64_t in_flight, int64_t cap, int priority)
{
    if (cap <= 0)
        return true;
    if (priority < UPSTREAM_PRIORITY_MIN)
        priority = UPSTREAM_PRIORITY_MIN;
    if (priority > UPSTREAM_PRIORITY_MAX)
        priority = UPSTREAM_PRIORITY_MAX;
    /* cap <= 1e9 (config), so cap * 10 cannot overflow; in_flight never passes cap */
    return in_flight * 10 < cap * (priority + 1);
}

void upstream_cap_set(struct upstream_cap *c, int64_t cap)
{
    atomic_store_explicit(&c->cap, cap > 0 ? cap : 0, memory_order_relaxed);
}

bool upstream_cap_take(struct upstream_cap *c, int priority, bool *counted)
{
    *counted = false;
    int64_t cap = atomic_load_explicit(&c->cap, memory_order_relaxed);
    if (cap == 0)
        return true;
    int64_t n = atomic_load_explicit(&c->inflight, memory_order_relaxed);
    do {
        if (!upstream_cap_admits(n, cap, priority))
            return false;
    } while (!atomic_compare_exchange_weak_explicit(&c->inflight, &n, n + 1, memory_order_relaxed,
                                                    memory_order_relaxed));
    *counted = true;
    return true;
}

void upstream_cap_give(struct upstream_cap *c)
{
    atomic_fetch_sub_explicit(&c->inflight, 1, memory_order_relaxed);
}
