/* Owns the parsed upstream URLs of a forwarder (upstream_urls.h): a set is freed exactly
 * when its holders reach zero, and a transfer never names a handle of a freed set. */
#include "proxy/upstream_urls.h"

#include <stdlib.h>

#include "proxy/config.h"

struct upstream_url_set {
    unsigned holders;
    size_t n;
    CURLU *handles[];
};

static void set_free(struct upstream_url_set *set)
{
    for (size_t i = 0; i < set->n; i++)
        curl_url_cleanup(set->handles[i]);
    free(set);
}

/* cfg's upstreams parsed, held once (by being current); NULL when out of memory or when
 * curl does not take one of them (the start check has said why). */
static struct upstream_url_set *set_parse(const struct proxy_config *cfg)
{
    struct upstream_url_set *set = calloc(1, sizeof(*set) + cfg->n_upstreams * sizeof(set->handles[0]));
    if (set == NULL)
        return NULL;
    set->holders = 1;
    for (; set->n < cfg->n_upstreams; set->n++) {
        CURLU *h = curl_url();
        if (h == NULL || curl_url_set(h, CURLUPART_URL, cfg->upstreams[set->n], 0) != CURLUE_OK) {
            curl_url_cleanup(h);
            set_free(set);
            return NULL;
        }
        set->handles[set->n] = h;
    }
    return set;
}

void upstream_urls_done(struct upstream_url_set *set)
{
    if (set != NULL && --set->holders == 0)
        set_free(set);
}

void upstream_urls_use(struct upstream_urls *urls, const struct proxy_config *cfg)
{
    upstream_urls_done(urls->current);
    urls->current = set_parse(cfg);
}

struct upstream_url_set *upstream_urls_name(struct upstream_urls *urls, CURL *e, size_t i, const char *url)
{
    struct upstream_url_set *set = urls->current;
    if (set == NULL || i >= set->n) {
        curl_easy_setopt(e, CURLOPT_CURLU, NULL);
        curl_easy_setopt(e, CURLOPT_URL, url);
        return NULL;
    }
    /* No URL string: curl builds it from the handle when the transfer starts. */
    curl_easy_setopt(e, CURLOPT_URL, NULL);
    curl_easy_setopt(e, CURLOPT_CURLU, set->handles[i]);
    set->holders++;
    return set;
}

void upstream_urls_clear(struct upstream_urls *urls)
{
    upstream_urls_done(urls->current);
    urls->current = NULL;
}
