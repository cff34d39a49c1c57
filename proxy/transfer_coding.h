/* A request's Transfer-Encoding, read as RFC 9112 6.1 and 6.3 ask and as libmicrohttpd
 * 0.9.75 frames the body: it decodes a chunked body only when the first Transfer-Encoding
 * field's value is exactly "chunked" (any case; the leading whitespace gone, the trailing
 * kept), and reads anything else until the connection closes. A head whose framing the
 * proxy and libmicrohttpd could read differently is refused. Pure: no I/O. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct transfer_coding {
    size_t fields;       /* Transfer-Encoding fields seen */
    size_t codings;      /* list elements, the empty ones skipped */
    size_t chunked;      /* how many of them are a bare "chunked" */
    bool chunked_last;   /* the last one is */
    bool malformed;      /* an element that is no transfer-coding */
    bool first_is_plain; /* the first field's value is "chunked" as libmicrohttpd reads it */
};

enum transfer_coding_verdict {
    TRANSFER_CODING_NONE,        /* no Transfer-Encoding */
    TRANSFER_CODING_CHUNKED,     /* chunked alone: libmicrohttpd reads the body */
    TRANSFER_CODING_BAD_FRAMING, /* 400 and close: chunked is not the last coding, or is
                                    there twice, or the list is empty or malformed, or in
                                    HTTP/1.0, or spelled so libmicrohttpd would not read it */
    TRANSFER_CODING_UNSUPPORTED, /* 501 and close: other codings before the final chunked */
};

/* Adds one Transfer-Encoding field's value (len bytes, as libmicrohttpd hands it). */
void transfer_coding_add(struct transfer_coding *tc, const char *value, size_t len);

/* What to do with the request's body; http_1_0: the request line says HTTP/1.0, where
 * any Transfer-Encoding means faulty framing (RFC 9112 6.1). */
enum transfer_coding_verdict transfer_coding_verdict(const struct transfer_coding *tc, bool http_1_0);
