/* The configured upstreams, each parsed once into a CURLU handle that transfers name with
 * CURLOPT_CURLU: given a URL string, curl parses it and builds it again on every transfer;
 * given a handle, it only builds the string. One per forwarder, used on its thread.
 *
 * A set is the parsed list of one configuration. A reload makes a new set current; the
 * set it replaces is freed when the last transfer that named one of its handles has ended:
 * curl reads the handle when the transfer starts and again when it connects, which may
 * come after the reload. A set counts its holders (being current is one, each transfer
 * another). */
#pragma once
#include <curl/curl.h>
#include <stddef.h>

struct proxy_config;
struct upstream_url_set;

struct upstream_urls {
    struct upstream_url_set *current;   /* NULL: not parsed (out of memory): URL strings */
};

/* Parses cfg's upstreams into the current set; the one it replaces goes once no transfer
 * holds it. */
void upstream_urls_use(struct upstream_urls *urls, const struct proxy_config *cfg);

/* Names upstream i (whose URL is url) on e for its next transfer: the current set's
 * handle, or url itself when there is no set. Returns the set the transfer now holds, to
 * give back with upstream_urls_done when it has ended (NULL: none). */
struct upstream_url_set *upstream_urls_name(struct upstream_urls *urls, CURL *e, size_t i, const char *url);

/* A transfer that held set (NULL: none) has ended. */
void upstream_urls_done(struct upstream_url_set *set);

/* The forwarder ends: the current set goes once no transfer holds it. */
void upstream_urls_clear(struct upstream_urls *urls);
