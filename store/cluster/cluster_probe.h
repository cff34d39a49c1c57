/* `tierproxy --check` in cluster mode: asks the seed nodes of a Redis Cluster, one after
 * the other, for its state and slot map (blocking hiredis calls; never on a worker's
 * event loop). Issue 14. */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Tries the seeds ([limits] redis in cluster mode, comma-separated redis:// or rediss://
 * URLs; over TLS verified with ca_file, NULL or "" for the system's CAs) in order until one
 * answers CLUSTER INFO and CLUSTER SLOTS, each connection and command bounded by
 * timeout_ms. Writes one line for the operator to report (never a password):
 *   "cluster_state ok: 3 masters serve all 16384 slots (asked 127.0.0.1:7000)"
 * followed by a warning when the node asked has cluster-require-full-coverage yes.
 * Returns 0 when the cluster is ok and every slot has a master; -EINVAL for a bad seed
 * list, or a seed that is not a cluster node; -EACCES when a seed refused the login
 * (a wrong or missing password); -EPERM when a seed's TLS certificate is not trusted;
 * -EHOSTUNREACH when no seed answered (the
 * report names each seed and why); -EAGAIN when the cluster answered but is not ok
 * (cluster_state fail, or slots without a master). */
int cluster_probe(const char *seeds, const char *ca_file, int64_t timeout_ms, char *report, size_t reportlen);
