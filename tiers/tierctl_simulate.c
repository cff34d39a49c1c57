/* tierctl simulate LOG: replays an access log (tiers/simulate.h). The catalog is read only
 * for --plan or each user's plan, never written; with LIMIT-FLAGS none is needed
 * (tierctl.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "tiers/simulate.h"
#include "tiers/snapshot.h"
#include "tiers/tierctl.h"

/* The rules the LIMIT-FLAGS give (each --rate, then --concurrency), described in against:
 * "10/s sliding-log, 500/min sliding-log, concurrency 3". */
static void given_rules(const struct limit_flags *lf, struct simulate_options *opt, char *against, size_t len)
{
    char rate[64];
    for (int i = 0; i < lf->n_rates; i++) {
        struct limit_rule *r = &opt->given[opt->n_given++];
        *r = (struct limit_rule){
            .id = (int64_t)opt->n_given, .kind = lf->algorithm ? lf->algorithm_value : LIMIT_SLIDING_LOG,
            .rate = lf->rate_amount[i], .burst = lf->burst ? lf->burst_value : 0, .window_ms = lf->rate_window_ms[i],
        };
        append(against, len, "%s%s", i ? ", " : "", limit_rate_format(r->rate, r->window_ms, rate, sizeof(rate)));
        if (r->burst)
            append(against, len, " burst %" PRId64, r->burst);
        append(against, len, " %s", limit_kind_name(r->kind));
    }
    if (lf->concurrency) {
        struct limit_rule *r = &opt->given[opt->n_given++];
        *r = (struct limit_rule){
            .id = (int64_t)opt->n_given, .kind = LIMIT_CONCURRENCY, .rate = lf->concurrency_value, .window_ms = 30000,
        };
        append(against, len, "%sconcurrency %" PRId64, against[0] ? ", " : "", lf->concurrency_value);
    }
}

/* --plan NAME, or each user's plan: the rules from the catalog. Returns 0 or the status. */
static int catalog_rules(struct cli *c, struct simulate_options *opt, struct snapshot **psnap, char *against,
                         size_t len)
{
    const char *plan = c->args.flag[FLAG_PLAN];
    char err[512];
    if (snapshot_load(c->db_path, psnap, err, sizeof(err)))
        return cli_fail("%s", err);
    opt->snap = *psnap;
    if (!plan) {
        snprintf(against, len, "each user's current plan in %s", c->db_path);
        return 0;
    }
    opt->plan = snapshot_find_plan(*psnap, plan);
    if (!opt->plan)
        return cli_fail("no plan named \"%s\" in %s", plan, c->db_path);
    snprintf(against, len, "the current limits of plan %s in %s", plan, c->db_path);
    return 0;
}

int cmd_simulate(struct cli *c)
{
    const struct limit_flags *lf = &c->lf;
    bool given = lf->n_rates || lf->burst || lf->algorithm || lf->concurrency;
    if (c->args.flag[FLAG_PLAN] && given)
        return cli_usage_error(&c->args, "give --plan or LIMIT-FLAGS, not both");
    int r = limit_flags_check(c, false);
    if (r)
        return r;
    struct simulate_options opt = {0};
    struct snapshot *snap = NULL;
    char against[512] = "", err[512];
    if (given)
        given_rules(lf, &opt, against, sizeof(against));
    else
        r = catalog_rules(c, &opt, &snap, against, sizeof(against));
    if (r == 0 && simulate_file(c->args.pos[0], &opt, against, c->args.flag[FLAG_JSON] != NULL, stdout, stderr, err,
                                sizeof(err)) != 0)
        r = cli_fail("%s", err);
    snapshot_unref(snap);
    if (r == 0 && (fflush(stdout) != 0 || ferror(stdout)))
        return cli_fail("cannot write the output: %s", strerror(errno));
    return r;
}
