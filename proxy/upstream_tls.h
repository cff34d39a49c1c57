/* TLS to https:// upstreams, one set of rules for both ways the proxy reaches an upstream:
 * libcurl for HTTP (forward.c) and an OpenSSL bufferevent for WebSocket tunnels
 * (websocket.c). The certificate is verified against the system's CAs, or against
 * [proxy] upstream_ca_file alone when it is set, and must name the upstream's host (the
 * host of the upstream URL, also sent as SNI unless it is an IP address);
 * upstream_tls_verify = no turns both checks off.
 *
 * A reload that changes upstream_ca_file or upstream_tls_verify is seen by HTTP and tunnels
 * alike (open tunnels keep what they were opened with), and a reload that turns
 * verification off writes the same warning as a start. The TLS failure line quotes curl's
 * error buffer, one per worker: of several transfers failing in one loop pass, it names the
 * last one's reason.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include <curl/curl.h>
#include <openssl/ssl.h>

struct proxy_config;

/* True for an "https://..." URL (any case). */
bool upstream_is_https(const char *url);

/* Sets curl's TLS options on e for cfg: CA file or the system's, peer and host
 * verification on or off. Every transfer gets them, so a reload that changes them applies
 * to pooled handles too. */
void upstream_tls_curl_options(CURL *e, const struct proxy_config *cfg);

/* Writes the warning on stderr when cfg turns certificate verification off; nothing
 * otherwise. Called at start, by --check, and by a reload that turns it off. */
void upstream_tls_warn_unverified(const struct proxy_config *cfg);

/* After a transfer ended with result: when it is a TLS failure (handshake, certificate,
 * CA file), writes why on stderr, at most once per 10 s per thread (every worker is one),
 * naming the upstream (scheme, host and port only), curl's error text (curl_error, its
 * CURLOPT_ERRORBUFFER; NULL or "" for none) and OpenSSL's verdict on the certificate.
 * Other results write nothing. */
void upstream_tls_log_failure(CURL *e, CURLcode result, const char *curl_error);

/* The OpenSSL context a worker's WebSocket tunnels use, built from cfg's settings and
 * rebuilt when they change (a reload). */
struct upstream_tls;

/* Returns the context for cfg in *pctx (owned by *ptls; an SSL made from it holds its own
 * reference), creating or rebuilding *ptls as needed. Returns 0, or -ENOMEM / -EINVAL with
 * a reason in err (an unreadable CA file). */
int upstream_tls_context(struct upstream_tls **ptls, const struct proxy_config *cfg, SSL_CTX **pctx,
                         char *err, size_t errlen);

/* A client SSL for one connection to host: SNI (for a name, not an IP address) and the
 * name or address the certificate must carry when verifying. NULL on failure. The caller
 * frees it (a bufferevent made with BEV_OPT_CLOSE_ON_FREE does). */
SSL *upstream_tls_ssl_new(SSL_CTX *ctx, const char *host);

/* Writes why a TLS handshake on ssl failed (the certificate's verdict, else OpenSSL's
 * queued error err_code, 0 for none) on stderr, rate-limited like upstream_tls_log_failure. */
void upstream_tls_log_handshake_failure(SSL *ssl, unsigned long err_code, const char *upstream);

/* Frees *tls (NULL is fine). */
void upstream_tls_free(struct upstream_tls *tls);
