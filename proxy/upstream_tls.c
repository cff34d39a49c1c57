/* TLS to https:// upstreams: the same verification for curl's transfers and the WebSocket
 * tunnels' OpenSSL connections. */
#include "proxy/upstream_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "proxy/config.h"
#include "proxy/log.h"
#include "store/clock.h"

/* A broken certificate fails every request: one line per worker per this long. */
#define FAILURE_LOG_INTERVAL_MS 10000

bool upstream_is_https(const char *url)
{
    return url != NULL && strncasecmp(url, "https://", 8) == 0;
}

/* libcurl's own defaults (Debian's: the system bundle and /etc/ssl/certs), read once from
 * a fresh handle, to put back when a reload drops upstream_ca_file. */
static char *default_cainfo, *default_capath;
static pthread_once_t defaults_once = PTHREAD_ONCE_INIT;

static void read_curl_defaults(void)
{
    CURL *e = curl_easy_init();
    char *cainfo = NULL, *capath = NULL;
    if (e == NULL)
        return;
    if (curl_easy_getinfo(e, CURLINFO_CAINFO, &cainfo) == CURLE_OK && cainfo != NULL)
        default_cainfo = strdup(cainfo);
    if (curl_easy_getinfo(e, CURLINFO_CAPATH, &capath) == CURLE_OK && capath != NULL)
        default_capath = strdup(capath);
    curl_easy_cleanup(e);
}

void upstream_tls_curl_options(CURL *e, const struct proxy_config *cfg)
{
    long verify = cfg->upstream_tls_verify ? 1L : 0L;
    pthread_once(&defaults_once, read_curl_defaults);
    /* With a CA file, that file alone is trusted, as nginx's proxy_ssl_trusted_certificate. */
    curl_easy_setopt(e, CURLOPT_CAINFO, cfg->upstream_ca_file != NULL ? cfg->upstream_ca_file : default_cainfo);
    curl_easy_setopt(e, CURLOPT_CAPATH, cfg->upstream_ca_file != NULL ? NULL : default_capath);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, verify);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, verify ? 2L : 0L);
}

void upstream_tls_warn_unverified(const struct proxy_config *cfg)
{
    if (cfg->upstream_tls_verify)
        return;
    bool any = false;
    for (size_t i = 0; i < cfg->n_upstreams; i++)
        any |= upstream_is_https(cfg->upstreams[i]);
    log_say(LOG_LEVEL_WARN, "[proxy] upstream_tls_verify = no: the certificates of https upstreams are not verified%s",
            any ? "; anyone on the path to them can read and change the traffic" : " (none is configured now)");
}

/* True when this thread may log a failure now (and it counts as logged). */
static bool may_log(void)
{
    static _Thread_local int64_t last_ms = INT64_MIN;
    int64_t now = store_mono_ms();
    if (last_ms != INT64_MIN && now - last_ms < FAILURE_LOG_INTERVAL_MS)
        return false;
    last_ms = now;
    return true;
}

/* "https://host:port" of a URL: the scheme and authority, no path or query. */
static void url_origin(const char *url, char *buf, size_t size)
{
    const char *p = url != NULL ? strstr(url, "://") : NULL;
    size_t len = p != NULL ? (size_t)(p + 3 - url) + strcspn(p + 3, "/?#") : 0;
    snprintf(buf, size, "%.*s", (int)len, url != NULL ? url : "");
}

static bool is_tls_failure(CURLcode result)
{
    switch (result) {
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_USE_SSL_FAILED:
        return true;
    default:
        return false;
    }
}

void upstream_tls_log_failure(CURL *e, CURLcode result, const char *curl_error)
{
    if (!is_tls_failure(result) || !may_log())
        return;
    char *url = NULL, origin[300];
    long verify_result = 0;
    curl_easy_getinfo(e, CURLINFO_EFFECTIVE_URL, &url);
    url_origin(url, origin, sizeof(origin));
    if (curl_easy_getinfo(e, CURLINFO_SSL_VERIFYRESULT, &verify_result) != CURLE_OK)
        verify_result = X509_V_OK;
    /* curl's own text names the certificate's problem; without it, OpenSSL's verdict (curl
       reports a name mismatch as X509_V_ERR_UNSPECIFIED, which says nothing) */
    bool have_text = curl_error != NULL && curl_error[0] != '\0';
    bool say_verdict = !have_text && verify_result != X509_V_OK && verify_result != X509_V_ERR_UNSPECIFIED;
    log_say(LOG_LEVEL_ERROR, "upstream %s: TLS failed: %s%s%s (502; like failures are not logged for 10 s)", origin,
            have_text ? curl_error : curl_easy_strerror(result), say_verdict ? ": certificate: " : "",
            say_verdict ? X509_verify_cert_error_string(verify_result) : "");
}

struct upstream_tls {
    SSL_CTX *ctx;
    bool verify;
    char *ca_file; /* NULL: the system's CAs */
};

void upstream_tls_free(struct upstream_tls *tls)
{
    if (tls == NULL)
        return;
    SSL_CTX_free(tls->ctx);
    free(tls->ca_file);
    free(tls);
}

static bool same_settings(const struct upstream_tls *tls, const struct proxy_config *cfg)
{
    if (tls->verify != cfg->upstream_tls_verify)
        return false;
    if (tls->ca_file == NULL || cfg->upstream_ca_file == NULL)
        return tls->ca_file == cfg->upstream_ca_file;
    return strcmp(tls->ca_file, cfg->upstream_ca_file) == 0;
}

int upstream_tls_context(struct upstream_tls **ptls, const struct proxy_config *cfg, SSL_CTX **pctx,
                         char *err, size_t errlen)
{
    if (*ptls != NULL && same_settings(*ptls, cfg)) {
        *pctx = (*ptls)->ctx;
        return 0;
    }
    struct upstream_tls *tls = calloc(1, sizeof(*tls));
    int rc = -ENOMEM;
    if (tls == NULL)
        goto fail;
    tls->verify = cfg->upstream_tls_verify;
    if (cfg->upstream_ca_file != NULL && (tls->ca_file = strdup(cfg->upstream_ca_file)) == NULL)
        goto fail;
    if ((tls->ctx = SSL_CTX_new(TLS_client_method())) == NULL)
        goto fail;
    SSL_CTX_set_min_proto_version(tls->ctx, TLS1_2_VERSION);
    rc = -EINVAL;
    if (tls->ca_file != NULL ? SSL_CTX_load_verify_locations(tls->ctx, tls->ca_file, NULL) != 1
                             : SSL_CTX_set_default_verify_paths(tls->ctx) != 1) {
        snprintf(err, errlen, "cannot load the CA certificates %s%s",
                 tls->ca_file != NULL ? "of " : "(the system's)", tls->ca_file != NULL ? tls->ca_file : "");
        goto fail;
    }
    ERR_clear_error();
    SSL_CTX_set_verify(tls->ctx, tls->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    upstream_tls_free(*ptls);
    *ptls = tls;
    *pctx = tls->ctx;
    return 0;
fail:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "out of memory");
    ERR_clear_error();
    upstream_tls_free(tls);
    return rc;
}

static bool is_ip_address(const char *host)
{
    unsigned char a[16];
    return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

SSL *upstream_tls_ssl_new(SSL_CTX *ctx, const char *host)
{
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL)
        return NULL;
    bool ip = is_ip_address(host);
    /* SNI carries names only (RFC 6066 3), as curl does. */
    int ok = ip ? 1 : SSL_set_tlsext_host_name(ssl, host);
    /* The certificate must name the host: an IP address in an iPAddress entry, a name in a
     * dNSName one (no partial wildcards, as curl). */
    if (ok == 1 && ip) {
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host);
    } else if (ok == 1) {
        SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = SSL_set1_host(ssl, host);
    }
    if (ok != 1) {
        SSL_free(ssl);
        ERR_clear_error();
        return NULL;
    }
    return ssl;
}

void upstream_tls_log_handshake_failure(SSL *ssl, unsigned long err_code, const char *upstream)
{
    if (!may_log())
        return;
    long verify_result = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;
    char why[256] = "the connection closed during the handshake";
    if (verify_result != X509_V_OK)
        snprintf(why, sizeof(why), "certificate: %s", X509_verify_cert_error_string(verify_result));
    else if (err_code != 0)
        ERR_error_string_n(err_code, why, sizeof(why));
    char origin[300];
    url_origin(upstream, origin, sizeof(origin));
    log_say(LOG_LEVEL_ERROR, "upstream %s: WebSocket TLS failed: %s (502; like failures are not logged for 10 s)",
            origin, why);
}
