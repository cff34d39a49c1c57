/* A request's concurrency slots (leases in the limiter) and its place among the requests in
 * flight to the upstream (upstream_cap.h): taken at head time, given back exactly once. */
#pragma once
#include <stdbool.h>

#include "proxy/request_state.h"
#include "store/limiter.h"

/* Asks the limiter about r's limits; when some are concurrency limits, under a lease id
 * unique to this process and request, so that an allowed check holds r's slots. done(r, ...)
 * as limiter_check says; its returns. */
int request_check_limits(struct request *r, limiter_done_fn *done);

/* Gives back r's slots and calls then(r) once the store has applied that (at once when r
 * holds none). The end of a response goes to the client only after this, so the client's
 * next request cannot meet its own old slot. */
void request_release_then(struct request *r, void (*then)(struct request *r));

/* True while r's slots are not known to be given back (the end of its response waits). */
bool request_release_pending(const struct request *r);

/* Gives back r's concurrency slots, if it holds any (idempotent). */
void request_release_slots(struct request *r);

/* Gives back r's place among the requests in flight to the upstream (idempotent): once
 * the upstream's answer is in, or the request will not go (refused, client gone). */
void request_give_upstream_place(struct request *r);

/* request_release_pending for the hooks (upstream_hooks, raw_response_hooks): owner is
 * the request. */
bool request_waits_for_slots(void *owner);
