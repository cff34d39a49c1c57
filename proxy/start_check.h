/* What a start checks before it listens, and what `tierproxy --check` checks besides. Every
 * problem is one error line on stderr (log.h) naming where its value came from (the file
 * and line, the flag or the variable), all of them, not only the first.
 *
 * A start checks the listen addresses (a host name resolved with getaddrinfo, its first
 * IPv4 address, else its first IPv6 one, as HAProxy binds a name), the upstream URLs as
 * curl parses them, [limits] redis as the store reads it, the access log (opened), the
 * catalog and anonymous_plan. --check adds, as warnings (exit 0), what a start survives:
 * Redis unreachable (a refused login or an untrusted TLS certificate stays an error), each
 * upstream that does not accept a connection (curl CONNECT_ONLY, with the TLS handshake of
 * an https one, at most 2 s each), and a listen address that cannot be bound (bound for a
 * moment without SO_REUSEPORT, so a process listening there is seen). --check shows at
 * least what info shows, whatever [log] level says: its verdict is the point of running it.
 */
#pragma once
#include <stdbool.h>
#include <sys/socket.h>

struct proxy_config;
struct access_log;

/* The listen addresses, host names resolved (at start, as nginx and HAProxy do). */
struct start_addresses {
    struct sockaddr_storage listen; /* [proxy] listen */
    struct sockaddr_storage admin;  /* [admin] listen, when it is on */
};

/* Checks cfg as a start does: the listen addresses (resolved into *addrs), the upstream
 * URLs, [limits] redis, the access log (opened, as the start would: *plog gets it when
 * plog is not NULL, else it is closed again), the catalog and the plan the configuration
 * names. With probe (--check) it also asks Redis (a refused login is an error), connects
 * to each upstream and binds each listen address for a moment: one that cannot be reached
 * or is in use is a warning, as a start survives it. Writes the "configuration ok" line
 * when all is well. Returns 0, or 1 when any error was found. */
int start_check(const struct proxy_config *cfg, bool probe, struct start_addresses *addrs, struct access_log **plog);
