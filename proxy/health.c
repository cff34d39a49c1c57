/* The /health verdict of health.h. Pure: no state, no allocation, the strings static. 503
 * only when no catalog is served or the store fails (unreachable or answering errors) under
 * on_store_error = closed; a Redis Cluster with some masters answering is degraded, never
 * 503. concurrency is named only while the store fails and its mode differs from the rate
 * limits'. */
#include "proxy/health.h"

#include <stdbool.h>

static const char *mode_word(enum limiter_store_error mode)
{
    switch (mode) {
    case LIMITER_STORE_ERROR_LOCAL:
        return "local";
    case LIMITER_STORE_ERROR_OPEN:
        return "open";
    case LIMITER_STORE_ERROR_CLOSED:
        break;
    }
    return "closed";
}

static const char *store_word(const struct health_input *in)
{
    switch (in->store) {
    case HEALTH_STORE_OK:
        return "ok";
    case HEALTH_STORE_PARTIAL:
        return "degraded";
    case HEALTH_STORE_ERROR:
        return "error";
    case HEALTH_STORE_UNREACHABLE:
        break;
    }
    return in->rate == LIMITER_STORE_ERROR_CLOSED ? "unreachable" : mode_word(in->rate);
}

static const char *plans_word(enum health_plans plans)
{
    return plans == HEALTH_PLANS_OK ? "ok" : plans == HEALTH_PLANS_UNREACHABLE ? "unreachable" : "missing";
}

/* Whether requests are refused because the store fails. on_store_error decides it: rate
 * limits are what every plan has, so under closed nearly every request gets 503, while a
 * concurrency_on_store_error of closed refuses only the plans with a concurrency limit
 * (/health then stays 200 and names it). A Redis Cluster with some masters answering
 * serves the others' users: taking the proxy out (every proxy of the fleet, as they share
 * the cluster) would refuse them too. */
static bool store_refuses(const struct health_input *in)
{
    bool failing = in->store == HEALTH_STORE_UNREACHABLE || in->store == HEALTH_STORE_ERROR;
    return failing && in->rate == LIMITER_STORE_ERROR_CLOSED;
}

struct health_verdict health_decide(const struct health_input *in)
{
    struct health_verdict v = { .http_status = 200, .status = "ok", .store = store_word(in),
                                .plans = plans_word(in->plans), .concurrency = NULL };
    bool failing = in->store == HEALTH_STORE_UNREACHABLE || in->store == HEALTH_STORE_ERROR;
    if (failing && in->concurrency != in->rate)
        v.concurrency = mode_word(in->concurrency);
    if (in->plans == HEALTH_PLANS_MISSING || store_refuses(in)) {
        v.http_status = 503;
        v.status = "unavailable";
    } else if (in->store != HEALTH_STORE_OK || in->plans != HEALTH_PLANS_OK) {
        v.status = "degraded";
    }
    return v;
}
