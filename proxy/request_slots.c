/* A request's concurrency slots and upstream place (request_slots.h): lease_held,
 * release_in_flight, after_release, lease_id and upstream_place of struct request. Each is
 * given back at most once, its flag cleared before the limiter or upstream_cap is told. A
 * lease id is "instance:worker:sequence", unique in the process. request_release_then calls
 * then(r) at most once: at once without slots, else on the store's answer, holding a
 * reference on r until then, and not at all if libmicrohttpd finished with r meanwhile. */
#include "proxy/request_slots.h"

#include <stdio.h>
#include <string.h>

#include "proxy/upstream_cap.h"

int request_check_limits(struct request *r, limiter_done_fn *done)
{
    struct request_context *ctx = r->ctx;
    if (!r->gate.has_concurrency)
        return limiter_check(ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n, -1,
                             done, r);
    snprintf(r->lease_id, sizeof(r->lease_id), "%s:%d:%llu", ctx->instance_id, ctx->worker_index,
             (unsigned long long)++ctx->lease_seq);
    return limiter_check_leased(ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n, -1,
                                r->lease_id, done, r);
}

static void on_released(void *arg)
{
    struct request *r = arg;
    r->release_in_flight = false;
    void (*then)(struct request *) = r->after_release;
    r->after_release = NULL;
    if (then != NULL && !r->mhd_done)
        then(r);
    request_unref(r);
}

void request_release_then(struct request *r, void (*then)(struct request *r))
{
    if (!r->lease_held) {
        then(r);
        return;
    }
    r->lease_held = false;
    r->release_in_flight = true;
    r->after_release = then;
    r->refs++; /* until on_released */
    limiter_release_notify(r->ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n,
                           r->lease_id, on_released, r);
}

bool request_release_pending(const struct request *r)
{
    return r->lease_held || r->release_in_flight;
}

void request_release_slots(struct request *r)
{
    if (!r->lease_held)
        return;
    r->lease_held = false;
    limiter_release(r->ctx->limiter, r->gate.subject, strlen(r->gate.subject), r->gate.rules, r->gate.n, r->lease_id);
}

void request_give_upstream_place(struct request *r)
{
    if (!r->upstream_place)
        return;
    r->upstream_place = false;
    upstream_cap_give(r->ctx->upstream_cap);
}

bool request_waits_for_slots(void *owner)
{
    return request_release_pending(owner);
}
