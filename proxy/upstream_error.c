/* Why an upstream gave no answer. See upstream_error.h. */
#include "proxy/upstream_error.h"

#include <string.h>

#include <event2/bufferevent.h>

/* curl's words for a timeout, whoever measured it */
#define TIMEOUT_TEXT "Timeout was reached"

const char *upstream_error_of_transfer(CURLcode result, long os_errno, bool timed_out)
{
    if (timed_out)
        return TIMEOUT_TEXT;
    if (result == CURLE_OK)
        return NULL;
    const char *system = os_errno != 0 ? strerrordesc_np((int)os_errno) : NULL;
    return system != NULL ? system : curl_easy_strerror(result);
}

const char *upstream_error_of_socket(short what, int err)
{
    if (what & BEV_EVENT_TIMEOUT)
        return TIMEOUT_TEXT;
    if (what & BEV_EVENT_EOF)
        return "Server closed the connection";
    const char *system = err != 0 ? strerrordesc_np(err) : NULL;
    return system != NULL ? system : "Couldn't connect to server";
}
