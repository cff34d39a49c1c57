#include "proxy/problem.h"

#include <string.h>

#include <jansson.h>
#include <microhttpd.h>

struct detail {
    const char *error_code;
    const char *sentence;
};

static const struct detail details[] = {
    { "malformed_request", "The request head is not valid HTTP/1.1." },
    { "request_header_too_large",
      "The request head is larger, or has more fields, query arguments or cookies, than the proxy takes." },
    { "uri_too_long", "The request target is longer than the proxy takes." },
    { "request_too_large", "The request body is larger than the proxy takes." },
    { "http_version_not_supported", "The proxy serves HTTP/1.x only." },
    { "bad_request_target", "The request target cannot be forwarded." },
    { "unsupported_transfer_coding", "The request body's transfer coding is not chunked." },
    { "bad_upstream_response", "The upstream answered with something that is not valid HTTP." },
};

const char *problem_detail(const char *error_code)
{
    for (size_t i = 0; i < sizeof(details) / sizeof(details[0]); i++)
        if (strcmp(details[i].error_code, error_code) == 0)
            return details[i].sentence;
    return "The proxy could not serve the request.";
}

int problem_body(char *buf, size_t cap, unsigned status, const char *error_code, const char *detail)
{
    const char *title = MHD_get_reason_phrase_for(status);
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:s}", "type", "about:blank", "title",
                             title[0] != '\0' ? title : "Error", "status", (json_int_t)status, "detail",
                             detail != NULL ? detail : problem_detail(error_code), "error_code", error_code);
    if (body == NULL)
        return -1;
    size_t len = json_dumpb(body, buf, cap, JSON_COMPACT);
    json_decref(body);
    if (len == 0 || len >= cap)
        return -1;
    buf[len] = '\0';
    return (int)len;
}
