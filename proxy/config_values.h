/* The setters of config_table.c's rows, one per type of value (enum dtype), and the
 * small parsers they share with the rest of proxy/config*.c. Not for use outside
 * proxy/config*.c. */
#pragma once
#include <stddef.h>

#include "proxy/config_directive.h"

/* Sets d's field of cfg from the text raw (trimmed here). Returns 0, -EINVAL with the
 * reason in why (the refused value quoted, a URL's password masked), or -ENOMEM. */
int config_directive_set(const struct directive *d, struct proxy_config *cfg, const char *raw, char *why,
                         size_t whylen);

config_setter config_set_hostport;     /* D_HOSTPORT */
config_setter config_set_urls;         /* D_URLS: http:// or https:// upstreams */
config_setter config_set_cidrs;        /* D_CIDRS */
config_setter config_set_paths;        /* D_PATHS: "/prefix" */
config_setter config_set_number;       /* D_INT, D_INT64 within min..max; D_BOOL, D_ENUM from words */
config_setter config_set_string;       /* D_STRING, per F_EMPTY_NULL, F_EMPTY_OK, F_READABLE */
config_setter config_set_token;        /* D_TOKEN: an HTTP header or parameter name */
config_setter config_set_word;         /* D_WORD, from words, stored as the word */
config_setter config_set_redis_url;    /* D_REDIS_URL */
config_setter config_set_access_log;   /* D_ACCESS_LOG */
config_setter config_set_styles;       /* D_STYLES */
config_setter config_set_share;        /* D_SHARE */

/* Frees a list of n strings (NULL: nothing). */
void config_strv_free(char **v, size_t n);

/* s for a message: at most buflen - 8 characters (then "..."), non-printable bytes as '?'.
 * Returns buf (CONFIG_QUOTE_MAX + 8 bytes: at most CONFIG_QUOTE_MAX characters). */
const char *config_quote(const char *s, char *buf, size_t buflen);

/* url quoted as config_quote does, with the password of each URL in it as *** (see
 * config_quote_url in config.h). */
const char *config_quote_masked(const char *url, char *buf, size_t buflen);

/* url with the password of each URL in it as "***" (config_quote_masked), malloc'd; NULL
 * when out of memory. */
char *config_masked_copy(const char *url);

/* Leading and trailing white space cut off, in place. */
char *config_trim(char *s);
