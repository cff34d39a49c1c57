/* TLS to Redis. See redis_tls.h. */
#include "store/redis/redis_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

/* The text of the oldest error in the thread's OpenSSL queue, or fallback. */
static const char *openssl_reason(const char *fallback)
{
    const char *reason = ERR_reason_error_string(ERR_peek_error());
    return reason != NULL ? reason : fallback;
}

SSL_CTX *redis_tls_context_new(const char *ca_file, char *err, size_t errlen)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        snprintf(err, errlen, "cannot make a TLS context: %s", openssl_reason("out of memory"));
        goto fail;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* hiredis appends to its output buffer (which may move) between tries of one write */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    if (ca_file == NULL || ca_file[0] == '\0') {
        if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
            snprintf(err, errlen, "cannot load the system's CA certificates: %s", openssl_reason("unknown error"));
            goto fail;
        }
    } else if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
        if (access(ca_file, R_OK) != 0)
            snprintf(err, errlen, "cannot load CA file %s: %s", ca_file, strerror(errno));
        else
            snprintf(err, errlen, "cannot load CA file %s: %s (a PEM file of CA certificates?)", ca_file,
                     openssl_reason("no certificate in it"));
        goto fail;
    }
    ERR_clear_error();
    return ctx;
fail:
    ERR_clear_error();
    SSL_CTX_free(ctx);
    return NULL;
}

static bool is_ip_address(const char *host)
{
    unsigned char addr[16];
    return inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
}

SSL *redis_tls_session_new(SSL_CTX *ctx, int fd, const char *host, char *err, size_t errlen)
{
    SSL *ssl = SSL_new(ctx);
    if (ssl == NULL || SSL_set_fd(ssl, fd) != 1)
        goto fail;
    if (is_ip_address(host)) {
        if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
            goto fail;
    } else if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1) {
        goto fail;
    }
    SSL_set_connect_state(ssl);
    return ssl;
fail:
    snprintf(err, errlen, "TLS: cannot start a session: %s", openssl_reason("out of memory"));
    ERR_clear_error();
    SSL_free(ssl);
    return NULL;
}

/* OpenSSL 3 reports a peer that closed the socket without a close_notify (Redis, when it
 * exits or drops a client) as a protocol error: for the operator, the server closed it. */
static bool closed_without_notify(void)
{
#ifdef SSL_R_UNEXPECTED_EOF_WHILE_READING
    return ERR_GET_REASON(ERR_peek_error()) == SSL_R_UNEXPECTED_EOF_WHILE_READING;
#else
    return false;
#endif
}

enum redis_tls_outcome redis_tls_failure(SSL *ssl, int ret, char *why, size_t whylen)
{
    int saved_errno = errno;
    enum redis_tls_outcome outcome = REDIS_TLS_BROKEN;
    switch (SSL_get_error(ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        outcome = REDIS_TLS_WANT_READ;
        break;
    case SSL_ERROR_WANT_WRITE:
        outcome = REDIS_TLS_WANT_WRITE;
        break;
    case SSL_ERROR_ZERO_RETURN:
        outcome = REDIS_TLS_CLOSED;
        snprintf(why, whylen, "TLS: the server closed the connection");
        break;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0 && saved_errno == 0) {
            outcome = REDIS_TLS_CLOSED;
            snprintf(why, whylen, "TLS: the server closed the connection");
        } else {
            snprintf(why, whylen, "TLS: %s", saved_errno != 0 ? strerror(saved_errno) : openssl_reason("I/O error"));
        }
        break;
    default: {
        long verified = SSL_get_verify_result(ssl);
        if (closed_without_notify()) {
            outcome = REDIS_TLS_CLOSED;
            snprintf(why, whylen, "TLS: the server closed the connection");
        } else if (verified != X509_V_OK) {
            outcome = REDIS_TLS_UNTRUSTED;
            snprintf(why, whylen, "TLS: certificate verify failed: %s", X509_verify_cert_error_string(verified));
        } else {
            snprintf(why, whylen, "TLS: %s", openssl_reason("protocol error"));
        }
        break;
    }
    }
    ERR_clear_error();
    return outcome;
}
