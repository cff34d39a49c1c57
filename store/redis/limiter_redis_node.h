/* The Redis limiter as one node of a Redis Cluster (issue 14): what store/cluster/limiter_cluster.c
 * needs of store/redis/limiter_redis.c beyond limiter.h. Private to store/.
 *
 * A cluster node limiter is limiter_redis with these differences: no SELECT (a cluster
 * serves database 0 alone); a MOVED or ASK reply to a check is handed to the caller as a
 * redirect instead of failing it; a call may be preceded by ASKING on the same
 * connection; renew.lua declares no KEYS (the leases one node holds span many slots,
 * and declared keys of several slots are CROSSSLOT even on one node). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

#include "store/redis/cluster_slot.h"
#include "store/limiter_impl.h"
#include "store/redis/redis_url.h"

struct event_base;

/* Called instead of done when a node answers a call with MOVED or ASK (redirect->host is
 * never empty: an empty one is the answering node's host), or with TRYAGAIN (redirect
 * NULL: the call's keys are half migrated; the same call may succeed in a moment). Nothing
 * was recorded. */
typedef void limiter_redirect_fn(void *arg, const struct cluster_redirect *redirect);

/* A limiter over the cluster node url->host:url->port, with url's credentials (url->db is
 * ignored: 0), over TLS verified by tls when url->tls (the limiter takes a reference of its
 * own). options->url and options->tls_ca_file are ignored. Connects in the background as
 * limiter_redis_create. Returns NULL with a reason in err (never the password). */
struct limiter *limiter_redis_node_create(struct event_base *base, const struct redis_store_options *options,
                                          const struct redis_url *url, SSL_CTX *tls, char *err, size_t errlen);

/* One check.lua call on this node, as the limiter's check (peek false) or peek (peek true),
 * arguments already validated, no denial cache. With asking, ASKING goes right before it on
 * the same connection (the slot is migrating to this node). A MOVED, ASK or TRYAGAIN answer
 * calls redirected(arg, ...) instead of done(arg, ...); any other outcome calls done. Exactly one
 * of them is called when this returns 0; returns -ENOMEM otherwise (neither is called). */
int limiter_redis_node_call(struct limiter *node, const char *subject, size_t subject_len,
                            const struct limit_rule *rules, size_t n, int64_t now_ms, const char *lease_id,
                            size_t lease_id_len, bool peek, bool asking, limiter_redirect_fn *redirected,
                            limiter_done_fn *done, void *arg);

/* Parked, a node limiter whose connection is lost does not reconnect (a dead master the
 * cluster replaced: no endless attempts); a connection it has stays. Unparked, it connects
 * again at once if it has no connection. */
void limiter_redis_node_park(struct limiter *node, bool parked);

/* Hands the releases `from` holds back (its node was down when they were made) to the node
 * limiter route(arg, key, key_len) names for each lease key (NULL: `from` keeps it), which
 * sends it now or holds it back as its own. For a node whose slots another master serves
 * now: the released leases stop counting there instead of at their TTL. */
void limiter_redis_node_hand_over(struct limiter *from,
                                  struct limiter *(*route)(void *arg, const char *key, size_t key_len), void *arg);

/* Takes over a lease another node's limiter held (its slot moved here): tracked and renewed
 * by this node from now on, nothing sent now. Returns 0, -EEXIST or -ENOMEM. */
int limiter_redis_node_adopt(struct limiter *node, const char *subject, size_t subject_len, int64_t rule_id,
                             int64_t ttl_ms, const char *id, size_t id_len);
