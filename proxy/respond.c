/* The proxy's own answers (respond.h): problem bodies wrapped in libmicrohttpd responses,
 * and RateLimit headers from a decided check. It keeps no state. A response copies its body
 * (or takes the 429's, freed by libmicrohttpd), so no buffer here outlives the call.
 * respond_send_closing never blocks (one MSG_DONTWAIT send, then the sending side shut) and
 * sends nothing rather than a cut answer. */
#include "proxy/respond.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "proxy/config.h"
#include "proxy/problem.h"
#include "proxy/ratelimit_headers.h"

static struct MHD_Response *body_response(const char *body, size_t len, const char *content_type,
                                          uint64_t *body_bytes)
{
    if (body_bytes != NULL)
        *body_bytes = len;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (resp != NULL)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    return resp;
}

/* The answer with Connection: close in one send(), then the sending side shut. */
static void send_closing(int fd, unsigned status, const char *content_type, const char *body, int body_len)
{
    char date[64];
    struct tm tm;
    time_t now = time(NULL);
    gmtime_r(&now, &tm);
    strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
    char msg[1024];
    int len = snprintf(msg, sizeof(msg),
                       "HTTP/1.1 %u %s\r\nDate: %s\r\nConnection: close\r\nContent-Type: %s\r\n"
                       "Content-Length: %d\r\n\r\n%s",
                       status, MHD_get_reason_phrase_for(status), date, content_type, body_len, body);
    if (body_len >= 0 && len > 0 && (size_t)len < sizeof(msg))
        (void)send(fd, msg, (size_t)len, MSG_NOSIGNAL | MSG_DONTWAIT);
    shutdown(fd, SHUT_WR);
}

void respond_send_closing(int fd, unsigned status, const char *error_code)
{
    char body[PROBLEM_BODY_MAX];
    send_closing(fd, status, PROBLEM_CONTENT_TYPE, body, problem_body(body, sizeof(body), status, error_code, NULL));
}

struct MHD_Response *respond_problem(unsigned status, const char *error_code, uint64_t *body_bytes)
{
    char body[PROBLEM_BODY_MAX];
    int n = problem_body(body, sizeof(body), status, error_code, NULL);
    return n < 0 ? NULL : body_response(body, (size_t)n, PROBLEM_CONTENT_TYPE, body_bytes);
}

struct MHD_Response *respond_error(const char *error_code, uint64_t *body_bytes)
{
    return respond_problem(problem_status(error_code), error_code, body_bytes);
}

/* The names of the limits that refused (as the ietf items name them) into names; returns
 * how many, or -1 when out of memory (names then holds nothing to free). */
static int violated_names(const struct gate_check *check, const struct limiter_result *result,
                          char *names[LIMITER_MAX_RULES])
{
    int n = 0;
    if (check == NULL || result == NULL || result->status != LIMITER_DECIDED)
        return 0;
    for (size_t i = 0; i < result->n && i < check->n; i++) {
        if (result->verdicts[i].allowed)
            continue;
        names[n] = ratelimit_policy_name(check->checked[i]->name);
        if (names[n] == NULL) {
            while (n > 0)
                free(names[--n]);
            return -1;
        }
        n++;
    }
    return n;
}

struct MHD_Response *respond_limited(const struct gate_check *check, const struct limiter_result *result,
                                     const struct gate_outcome *out, uint64_t *body_bytes)
{
    const char *error_code = out->error_code;
    int64_t retry_after_s = out->retry_after_s;
    char *names[LIMITER_MAX_RULES] = { NULL };
    int n = violated_names(check, result, names);
    if (n < 0)
        return NULL;
    size_t len = 0;
    char *body = problem_limited(error_code, retry_after_s, (const char *const *)names, (size_t)n, &len);
    while (n > 0)
        free(names[--n]);
    if (body == NULL)
        return NULL;
    if (body_bytes != NULL)
        *body_bytes = len;
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(body);
        return NULL;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, PROBLEM_CONTENT_TYPE);
    char value[32];
    snprintf(value, sizeof(value), "%lld", (long long)retry_after_s);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, value);
    return resp;
}

static void add_to_response(void *arg, const char *name, const char *value)
{
    MHD_add_response_header(arg, name, value);
}

/* The decided verdicts as header items; returns how many (0 without a decided check). */
static size_t ratelimit_items(const struct gate_check *check, const struct limiter_result *result,
                              struct ratelimit_item *items)
{
    size_t n = 0;
    if (result == NULL || result->status != LIMITER_DECIDED)
        return 0;
    for (size_t i = 0; i < result->n && i < check->n; i++) {
        const struct limit_verdict *v = &result->verdicts[i];
        bool concurrency = check->checked[i]->kind == TIER_LIMIT_CONCURRENCY;
        items[n++] = (struct ratelimit_item){
            .name = check->checked[i]->name,
            .limit = v->limit,
            .remaining = v->remaining,
            .reset_ms = v->reset_ms,
            .window_ms = concurrency ? 0 : check->checked[i]->rule.window_ms,
            .concurrency = concurrency,
            .rejected = !v->allowed,
        };
    }
    return n;
}

void respond_ratelimit_fields(unsigned styles, const struct gate_check *check, const struct limiter_result *result,
                              header_add_fn *add, void *arg)
{
    struct ratelimit_item items[LIMITER_MAX_RULES];
    size_t n = ratelimit_items(check, result, items);
    if (n > 0)
        ratelimit_headers_render(styles, items, n, result->now_ms, add, arg);
}

void respond_add_ratelimit_headers(unsigned styles, const struct gate_check *check, const struct limiter_result *result,
                                   struct MHD_Response *response)
{
    respond_ratelimit_fields(styles, check, result, add_to_response, response);
}

const struct limit_verdict *respond_closest_verdict(const struct gate_check *check, const struct limiter_result *result)
{
    struct ratelimit_item items[LIMITER_MAX_RULES];
    size_t n = ratelimit_items(check, result, items);
    return n > 0 ? &result->verdicts[ratelimit_closest(items, n)] : NULL;
}
