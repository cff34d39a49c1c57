/* TLS to Redis (rediss://): the client context, a session over a connected socket, and
 * what a failure means, in words an operator can act on. Shared by the blocking
 * connections (store/redis/redis_sync.c) and the workers' asynchronous ones
 * (store/redis/redis_async.c). Private to store/.
 *
 * TLS 1.2 or later; the server's certificate verified against [limits] redis_ca_file (a PEM
 * file of CAs) or, when it is empty, the system's CAs, and the URL's host checked against
 * it (SSL_set1_host and SNI for a name, X509_VERIFY_PARAM_set1_ip_asc for an address: a
 * cluster map names its nodes by address, so a cluster's certificates carry them as IP
 * SANs). No client certificate is sent: Redis runs with tls-auth-clients no or optional. In
 * cluster mode every seed is rediss:// or none is (the nodes the map names are reached the
 * way the seeds are). A certificate that is not trusted reads as one line naming the
 * server, OpenSSL's reason and the CAs used ("127.0.0.1:6390 is not trusted: TLS:
 * certificate verify failed: ... (CA certificates: /etc/tierproxy/redis-ca.pem)").
 */
#pragma once
#include <stddef.h>

#include <openssl/ssl.h>

/* A client context: TLS 1.2 or later, the server's certificate verified against the PEM
 * file ca_file (NULL or "": the system's CAs). Returns it (free with SSL_CTX_free; it is
 * reference counted and may be shared by the threads' sessions), or NULL with why in err,
 * such as "cannot load CA file /etc/x.pem: No such file or directory". */
SSL_CTX *redis_tls_context_new(const char *ca_file, char *err, size_t errlen);

/* A client session over the connected socket fd that checks the server's certificate
 * names host: a DNS name (also sent as SNI) or an IP address. Returns it (SSL_free; the
 * socket stays the caller's), or NULL with why in err. */
SSL *redis_tls_session_new(SSL_CTX *ctx, int fd, const char *host, char *err, size_t errlen);

enum redis_tls_outcome {
    REDIS_TLS_WANT_READ,    /* not done yet: call again when the socket is readable */
    REDIS_TLS_WANT_WRITE,   /* ... writable */
    REDIS_TLS_CLOSED,       /* the server closed the connection */
    REDIS_TLS_BROKEN,       /* the connection failed (a socket error, a TLS alert, a timeout) */
    REDIS_TLS_UNTRUSTED,    /* the server's certificate failed verification */
};

/* What the failed SSL_connect, SSL_read or SSL_write on ssl that returned ret means, with
 * why in why for the last three ("TLS: certificate verify failed: unable to get local
 * issuer certificate"). Call it at once (it reads errno); it empties the thread's OpenSSL
 * error queue. */
enum redis_tls_outcome redis_tls_failure(SSL *ssl, int ret, char *why, size_t whylen);
