/* A request's head on its way through libmicrohttpd (request_head.h). It owns the wait for
 * the rest of a later head; its rest_wait lives in the request's scratch. The wait is freed
 * before rest_in(owner) is called, so rest_in comes once per wait. A refused head is
 * answered on the socket once, with its sending side shut. When memory runs out the
 * connection is shut or the head marked unscreened, which request_head_check then checks
 * field by field: no head goes on unchecked. */
#include "proxy/request_head.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "proxy/forward.h"
#include "proxy/head_screen.h"
#include "proxy/head_wait.h"
#include "proxy/http1.h"
#include "proxy/pool_trim.h"
#include "proxy/respond.h"
#include "proxy/scratch.h"
#include "proxy/transfer_coding.h"

/* ---- a later head, before libmicrohttpd parses its field lines --------------------------- */

struct rest_wait {
    struct request_head *h;
    int fd;
    struct scratch *scratch;
    void (*rest_in)(void *owner);
    void *owner;
};

static int connection_fd(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci != NULL ? ci->connect_fd : -1;
}

/* Answers h's refusal on the socket with Connection: close and shuts the sending side. */
static void refuse(struct request_head *h, int fd, struct scratch *scratch)
{
    const struct head_screen *hs = &h->later.screen;
    h->refused_status = hs->status;
    if (h->later.method != NULL)
        h->method = scratch_strndup(scratch, h->later.method, h->later.method_len);
    if (fd >= 0)
        respond_send_closing(fd, hs->status, hs->error_code);
}

static void on_rest(void *arg, const struct head_screen *fields)
{
    struct rest_wait *rw = arg;
    struct request_head *h = rw->h;
    head_wait_free(h->wait);
    h->wait = NULL;
    if (fields == NULL) {
        /* gone, or too slow: libmicrohttpd reads the end of the stream and closes */
        shutdown(rw->fd, SHUT_RDWR);
    } else {
        later_head_complete(&h->later, fields);
        if (h->later.outcome == LATER_HEAD_REFUSED)
            refuse(h, rw->fd, rw->scratch);
    }
    rw->rest_in(rw->owner);
}

/* The head's rest is to come: waits for it on the socket (head_wait.h). */
static enum request_head_step wait_for_rest(struct request_head *h, int fd, struct event_base *base,
                                            struct scratch *scratch, void (*rest_in)(void *owner), void *owner)
{
    struct rest_wait *rw = scratch_alloc(scratch, sizeof(*rw));
    if (rw != NULL && fd >= 0) {
        *rw = (struct rest_wait){ .h = h, .fd = fd, .scratch = scratch, .rest_in = rest_in, .owner = owner };
        h->wait = head_wait_start(base, fd, h->later.fields, h->later.received, h->later.max_fields,
                                  h->later.entry_bytes, on_rest, rw);
    }
    if (h->wait != NULL)
        return REQUEST_HEAD_WAIT;
    if (fd >= 0)
        shutdown(fd, SHUT_RDWR); /* out of memory: the connection ends */
    return REQUEST_HEAD_GO;
}

/* Where conn's later head is, for later_head_screen: false when it is the connection's
 * first (the intake screened it), or not where a later head is read (h->unscreened then:
 * request_head_check checks it). */
static bool later_head_pool(struct request_head *h, struct MHD_Connection *conn, const char *uri,
                            const char **pool)
{
    if (!pool_trim_pool_start(conn, pool)) {
        h->unscreened = true; /* memory ran out at the connection's start */
        return false;
    }
    if (*pool == NULL)
        return false;
    if (uri < *pool || uri >= *pool + FORWARD_CLIENT_POOL_BYTES) {
        h->unscreened = true;
        return false;
    }
    return true;
}

enum request_head_step request_head_begin(struct request_head *h, struct MHD_Connection *conn, const char *uri,
                                          struct event_base *base, struct scratch *scratch,
                                          void (*rest_in)(void *owner), void *owner)
{
    const char *pool;
    if (!later_head_pool(h, conn, uri, &pool))
        return REQUEST_HEAD_GO;
    h->is_later = true;
    later_head_screen(pool, FORWARD_CLIENT_POOL_BYTES, uri, &h->later);
    if (h->later.outcome == LATER_HEAD_ACCEPTABLE)
        return REQUEST_HEAD_GO;
    if (h->later.outcome == LATER_HEAD_REFUSED || h->later.entry_bytes > MAX_HEAD_ENTRY_BYTES)
        later_head_drop_query(&h->later);
    int fd = connection_fd(conn);
    if (h->later.outcome == LATER_HEAD_INCOMPLETE)
        return wait_for_rest(h, fd, base, scratch, rest_in, owner);
    refuse(h, fd, scratch);
    return REQUEST_HEAD_REFUSED;
}

void request_head_free(struct request_head *h)
{
    head_wait_free(h->wait);
    h->wait = NULL;
}

/* ---- every head, once libmicrohttpd parsed it ------------------------------------------- */

/* What one pass over the fields libmicrohttpd parsed finds. The field rules themselves are
 * applied to the raw bytes (head_screen): a first head's by the intake, a later one's in
 * request_head_begin; only a head neither could screen has its names and values checked
 * here, as libmicrohttpd hands them over (a NUL has cut a value by then). */
struct head_pass {
    bool unscreened;
    size_t bytes;
    size_t entry_bytes;        /* the Cookie copies and entries in libmicrohttpd's pool */
    bool malformed;            /* a name that is no token, a control character in a value,
                                  a second Host */
    bool seen_single;          /* a field that may appear once (Host) was seen */
    size_t fields;
    const char *content_length;
    size_t content_length_len;
    bool conflicting_length;   /* two Content-Length values that differ */
    struct transfer_coding coding;
};

static void pass_value(struct head_pass *hp, const char *name, size_t name_size, const char *value,
                       size_t value_size)
{
    if (http1_name_is(name, name_size, "Content-Length")) {
        if (hp->content_length != NULL &&
            (hp->content_length_len != value_size || memcmp(hp->content_length, value, value_size) != 0))
            hp->conflicting_length = true;
        hp->content_length = value;
        hp->content_length_len = value_size;
    } else if (http1_name_is(name, name_size, "Cookie")) {
        hp->entry_bytes += head_screen_cookie_entry_bytes(value, value_size);
    }
}

static enum MHD_Result pass_field(void *cls, enum MHD_ValueKind kind, const char *name, size_t name_size,
                                  const char *value, size_t value_size)
{
    struct head_pass *hp = cls;
    (void)kind;
    hp->bytes += name_size + value_size + 4;
    hp->fields++;
    bool single = head_screen_single_field(name, name_size);
    if (hp->unscreened) {
        hp->malformed |= !http1_name_ok(name, name_size) || (value != NULL && !http1_value_ok(value, value_size));
        if (single)
            hp->malformed |= hp->seen_single || value == NULL || !head_screen_host_ok(value, value_size);
    }
    hp->seen_single |= single;
    if (value != NULL)
        pass_value(hp, name, name_size, value, value_size);
    if (http1_name_is(name, name_size, "Transfer-Encoding"))
        transfer_coding_add(&hp->coding, value != NULL ? value : "", value != NULL ? value_size : 0);
    return MHD_YES;
}

/* A later head ended where its screen found the end: libmicrohttpd parsed the bytes that
 * were screened, no NUL it could see and the screen could not. */
static bool parsed_as_screened(const struct request_head *h, struct MHD_Connection *conn, const char *method)
{
    if (!h->is_later)
        return true;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    return ci != NULL && later_head_parsed_alike(&h->later, method, ci->header_size);
}

static void verdict(struct head_verdict *out, unsigned status, const char *error_code, const char *decision)
{
    out->status = status;
    out->error_code = error_code;
    out->decision = decision;
}

/* The refusals RFC 9112 asks for of heads libmicrohttpd takes as they are (a problem body,
 * problem.h): a body whose framing is not chunked last, or not understood (6.1, 6.3), and
 * an HTTP/1.1 request without Host (3.2). True when one applies. */
static bool refused_by_rfc9112(const struct head_pass *hp, const char *version, struct head_verdict *out)
{
    bool http_1_0 = strcmp(version, MHD_HTTP_VERSION_1_0) == 0;
    switch (transfer_coding_verdict(&hp->coding, http_1_0)) {
    case TRANSFER_CODING_BAD_FRAMING:
        verdict(out, MHD_HTTP_BAD_REQUEST, "malformed_request", "malformed");
        break;
    case TRANSFER_CODING_UNSUPPORTED:
        verdict(out, MHD_HTTP_NOT_IMPLEMENTED, "unsupported_transfer_coding", "malformed");
        break;
    case TRANSFER_CODING_NONE:
    case TRANSFER_CODING_CHUNKED:
        if (http_1_0 || hp->seen_single) /* the single field is Host */
            return false;
        verdict(out, MHD_HTTP_BAD_REQUEST, "malformed_request", "malformed");
        break;
    }
    return true;
}

void request_head_check(const struct request_head *h, struct MHD_Connection *conn, const char *method,
                        const char *version, const char *raw_uri, int64_t max_body_bytes,
                        struct head_verdict *out)
{
    size_t method_len = strlen(method), uri_len = strlen(raw_uri);
    struct head_pass hp = { .bytes = uri_len + method_len, .unscreened = h->unscreened };
    hp.malformed = !head_screen_method_ok(method, method_len) || !head_screen_target_ok(raw_uri, uri_len) ||
                   !parsed_as_screened(h, conn, method);
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, pass_field, &hp);
    *out = (struct head_verdict){
        .fields = hp.fields,
        .pool_bytes = hp.bytes + hp.fields * HEAD_ENTRY_BYTES + hp.entry_bytes +
                      head_screen_query_entry_bytes(raw_uri, uri_len),
    };
    if (hp.bytes > MAX_HEAD_BYTES) {
        verdict(out, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "request_header_too_large", NULL);
        return;
    }
    int64_t length = -1;
    int length_rc = hp.content_length != NULL
                        ? http1_content_length(hp.content_length, hp.content_length_len, &length)
                        : 0;
    bool coded = hp.coding.fields > 0;
    out->expects_body = length > 0 || coded;
    if (hp.malformed || hp.conflicting_length || (coded && hp.content_length != NULL) || length_rc == -EINVAL)
        verdict(out, MHD_HTTP_BAD_REQUEST, "malformed_request", "malformed");
    else if (refused_by_rfc9112(&hp, version, out))
        return;
    else if (length_rc == -ERANGE || length > max_body_bytes)
        verdict(out, MHD_HTTP_CONTENT_TOO_LARGE, "request_too_large", NULL);
}

