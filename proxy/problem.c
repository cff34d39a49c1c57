/* The RFC 9457 problem bodies of problem.h. It owns the table of kinds: each error_code is
 * there once with its status and its sentence (problem_status, problem_detail), and a code
 * it does not know gets 500 and a general sentence. Nothing here keeps state; problem_body
 * writes into the caller's buffer and fails rather than cut a body short, and
 * problem_limited's text is the caller's to free. */
#include "proxy/problem.h"

#include <stdio.h>
#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

struct problem_kind {
    const char *error_code;
    unsigned status;
    const char *sentence;
};

static const struct problem_kind kinds[] = {
    { "malformed_request", 400, "The request head is malformed." },
    { "request_header_too_large", 431,
      "The request head is larger, or has more fields, query arguments or cookies, than the proxy takes." },
    { "uri_too_long", 414, "The request target is longer than the proxy takes." },
    { "request_too_large", 413, "The request body is larger than the proxy takes." },
    { "http_version_not_supported", 505, "The proxy serves HTTP versions 1.0 and 1.1 only." },
    { "bad_request_target", 400, "The request target cannot be forwarded." },
    { "unsupported_transfer_coding", 400, "The request body's transfer coding is not chunked." },
    { "bad_upstream_response", 502, "The upstream answered with something that is not valid HTTP." },
    { "missing_api_key", 401, "The request carries no API key." },
    { "invalid_api_key", 401, "The API key is unknown or revoked." },
    { "catalog_unavailable", 503, "The proxy has no catalog of plans to decide with yet." },
    { "limiter_unavailable", 503, "The limits cannot be checked now: the limiter store does not answer." },
    { "upstream_unavailable", 502, "The upstream could not be reached or gave no answer." },
    { "upstream_timeout", 504, "The upstream did not answer in time." },
    { "upstream_saturated", 503, "The upstream has as many requests in flight as the proxy lets through." },
    { "client_closed_request", 499, "The client went away before the answer." },
    { "not_found", 404, "The admin listener serves /health and /metrics only." },
    { "method_not_allowed", 405, "The admin listener answers GET and HEAD only." },
};

static const struct problem_kind *kind_of(const char *error_code)
{
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        if (strcmp(kinds[i].error_code, error_code) == 0)
            return &kinds[i];
    return NULL;
}

const char *problem_detail(const char *error_code)
{
    const struct problem_kind *k = kind_of(error_code);
    return k != NULL ? k->sentence : "The proxy could not serve the request.";
}

unsigned problem_status(const char *error_code)
{
    const struct problem_kind *k = kind_of(error_code);
    return k != NULL ? k->status : 500;
}

static json_t *problem_new(const char *type, const char *title, unsigned status, const char *detail,
                           const char *error_code)
{
    return json_pack("{s:s, s:s, s:I, s:s, s:s}", "type", type, "title", title, "status", (json_int_t)status,
                     "detail", detail, "error_code", error_code);
}

int problem_body(char *buf, size_t cap, unsigned status, const char *error_code, const char *detail)
{
    const char *title = status == 499 ? "Client Closed Request" : MHD_get_reason_phrase_for(status);
    json_t *body = problem_new("about:blank", title[0] != '\0' ? title : "Error", status,
                               detail != NULL ? detail : problem_detail(error_code), error_code);
    if (body == NULL)
        return -1;
    size_t len = json_dumpb(body, buf, cap, JSON_COMPACT);
    json_decref(body);
    if (len == 0 || len >= cap)
        return -1;
    buf[len] = '\0';
    return (int)len;
}

static const char *limited_what(const char *error_code)
{
    return strcmp(error_code, "concurrency_limit_exceeded") == 0 ? "Concurrency limit exceeded"
         : strcmp(error_code, "quota_exceeded") == 0                ? "Quota exceeded"
                                                                    : "Rate limit exceeded";
}

char *problem_limited(const char *error_code, int64_t retry_after_s, const char *const *violated, size_t n,
                      size_t *plen)
{
    char detail[96];
    snprintf(detail, sizeof(detail), "%s. Try again in %lld seconds.", limited_what(error_code),
             (long long)retry_after_s);
    json_t *body = problem_new(PROBLEM_TYPE_QUOTA_EXCEEDED, "Request cannot be satisfied as assigned quota has been exceeded",
                               429, detail, error_code);
    json_t *names = json_array();
    char *text = NULL;
    if (body == NULL || names == NULL)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (json_array_append_new(names, json_string(violated[i])) != 0)
            goto out;
    if (json_object_set_new(body, "retry_after", json_integer((json_int_t)retry_after_s)) != 0 ||
        json_object_set(body, "violated-policies", names) != 0)
        goto out;
    text = json_dumps(body, JSON_COMPACT);
    if (text != NULL)
        *plen = strlen(text);
out:
    json_decref(names);
    json_decref(body);
    return text;
}
