/* [proxy] upstream_max_inflight: the requests in flight to the upstream, per process (every
 * worker shares one counter), and who may add one (SPEC "Beyond per-window rates"): a
 * request of priority P (0 shed first .. 9 shed last) goes while fewer than
 * cap * (P + 1) / 10 are in flight, compared exactly (in_flight * 10 < cap * (P + 1)), so
 * priority 9 may fill the cap and priority 0 only its tenth.
 *
 * The place is taken at head time, after the gate found the plan and before the store is
 * asked: a shed request is answered before its body is read (503 upstream_saturated,
 * Retry-After: 1, Connection: close when a body was announced, decision "shed") and counts
 * against no limit; the store refusing it gives the place back. It is held until the
 * upstream's answer has been received (curl's transfer done) or the request ends otherwise;
 * a WebSocket handshake holds one until the upstream answers it, an open tunnel none. Cap 0
 * counts nothing (one relaxed atomic load per request); a reload changes the cap at once,
 * and requests taken under no cap are not counted until they end.
 */
#pragma once
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define UPSTREAM_PRIORITY_MIN 0
#define UPSTREAM_PRIORITY_MAX 9
#define UPSTREAM_PRIORITY_DEFAULT 5   /* a plan's default, and requests with no plan (exempt paths) */

struct upstream_cap {
    _Atomic int64_t cap;        /* 0: no cap, nothing counted */
    _Atomic int64_t inflight;   /* places taken */
};

/* Pure: whether a request of this priority may go with in_flight already in flight under
 * cap (0: always). A priority outside 0..9 counts as the nearest end. */
bool upstream_cap_admits(int64_t in_flight, int64_t cap, int priority);

/* Sets the cap (at start and on reload; 0 = off). Places taken stay counted. */
void upstream_cap_set(struct upstream_cap *c, int64_t cap);

/* Takes a place for a request of this priority. Returns true when it may go; *counted is
 * then set when a place was taken (give it back with upstream_cap_give once the upstream
 * exchange is over). With no cap: true, nothing counted. */
bool upstream_cap_take(struct upstream_cap *c, int priority, bool *counted);

void upstream_cap_give(struct upstream_cap *c);
