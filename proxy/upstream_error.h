/* Why an upstream gave no answer, in the words the access log's "upstream_error" carries
 * on a 502 or 504 line: the system's reason when a socket call failed ("Connection
 * refused", "Connection reset by peer"), else curl's ("Couldn't resolve host name",
 * "Timeout was reached"). Static strings: nothing to free. */
#pragma once
#include <stdbool.h>

#include <curl/curl.h>

/* A curl transfer that ended with result; os_errno is curl's CURLINFO_OS_ERRNO (0: none);
 * timed_out: the proxy's own upstream_timeout_ms ran out. NULL for CURLE_OK. */
const char *upstream_error_of_transfer(CURLcode result, long os_errno, bool timed_out);

/* A WebSocket handshake's connection that failed with the bufferevent event what
 * (BEV_EVENT_*), errno being err when it came. */
const char *upstream_error_of_socket(short what, int err);
