/* One rule for one subject, in process, with no locking: the per-connection counter the
 * proxy keeps for a WebSocket's --ws-messages limit. Same arithmetic as the stores. */
#pragma once
#include "store/limit.h"

struct local_limit;

/* Returns NULL on allocation failure. */
struct local_limit *local_limit_create(void);
void local_limit_destroy(struct local_limit *l);

/* Checks and (when allowed) records one event at now_ms under rule (a rate rule).
 * Returns true when allowed; fills *v when v is not NULL.
 * The rule's numbers may change between calls (a catalog reload): the state carries over as
 * in the memory store (a new kind starts afresh, and so does a new window but for a
 * sliding log, whose timestamps count under any window). An invalid rule or a
 * concurrency rule: false, nothing recorded, v all zero. If memory for a sliding log
 * cannot grow, the event is allowed and not recorded. Not thread-safe: one connection's. */
bool local_limit_check(struct local_limit *l, const struct limit_rule *rule, int64_t now_ms, struct limit_verdict *v);
