/* cluster_load: a load generator that issues the proxy's real limiter calls to Redis
 * masters and measures what they sustain (issue 14: checks per second one master
 * sustains, what three sustain, and the Redis CPU per check).
 *
 *   cluster_load [options] redis://127.0.0.1:P1 [redis://127.0.0.1:P2 ...]
 *
 * Each master URL gets its own limiter_redis (store/limiter.h, the store library the proxy
 * links), so every check is the proxy's EVALSHA of check.lua with the arguments the proxy
 * builds. The subjects of a master are ones whose key slot (of the key as limiter_redis
 * builds it: "<prefix>{<subject>}:<rule id>") that master owns, as CLUSTER SLOTS says when
 * the program starts; a node that is not in cluster mode owns every slot (a plain Redis,
 * for reference). Each master keeps K checks in flight on one libevent loop: a check's
 * reply sends the next one, subjects taken round robin.
 *
 * Before and after the measured window (after a warm-up) it reads INFO commandstats and
 * INFO cpu of every master and of the replicas CLUSTER SLOTS lists for them, and prints
 * per master: checks/s, allowed/rejected/errors, latency percentiles, and the Redis CPU per
 * check two ways: (used_cpu_user + used_cpu_sys) delta / checks (the whole server: network,
 * parsing, script) and cmdstat_evalsha usec delta / calls (the script alone), plus the
 * replicas' CPU per check and this program's own.
 *
 * Rate rules only (renew.lua, the lease renewal, is not cluster-ready yet). */
#include "cluster_load.h"

/* The plan every subject is checked against: a typical API plan's sustained rate and its
 * short burst guard. Both admit everything this program sends (10,000 subjects per master
 * share the load), so each check takes the write path of check.lua. */
const struct limit_rule PLAN[PLAN_RULES] = {
    {.id = 1, .kind = LIMIT_SLIDING_LOG, .rate = 3000, .burst = 0, .window_ms = 60000},
    {.id = 2, .kind = LIMIT_FIXED_WINDOW, .rate = 100, .burst = 0, .window_ms = 1000},
};
static const char PLAN_TEXT[] = "rule 1 sliding-log 3000/min + rule 2 fixed-window 100/s";

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double ts_diff_s(const struct timespec *a, const struct timespec *b)
{
    return (double)(b->tv_sec - a->tv_sec) + (double)(b->tv_nsec - a->tv_nsec) / 1e9;
}

static double rusage_cpu_s(const struct rusage *r)
{
    return (double)r->ru_utime.tv_sec + (double)r->ru_utime.tv_usec / 1e6 + (double)r->ru_stime.tv_sec +
           (double)r->ru_stime.tv_usec / 1e6;
}

/* The whole box's CPU time, busy and total, in clock ticks of every CPU (the "cpu" line
 * of /proc/stat: busy = all but idle and iowait). Returns 0, or -1 when unreadable. */
static int box_cpu(unsigned long long *pbusy, unsigned long long *ptotal)
{
    FILE *f = fopen("/proc/stat", "r");
    if (f == NULL)
        return -1;
    char line[512];
    int rc = -1;
    if (fgets(line, sizeof(line), f) != NULL && strncmp(line, "cpu ", 4) == 0) {
        unsigned long long total = 0, idle = 0;
        char *p = line + 4;
        for (int i = 0; i < 10; i++) {
            char *end = NULL;
            errno = 0;
            unsigned long long v = strtoull(p, &end, 10);
            if (errno != 0 || end == p)
                break;
            total += v;
            if (i == 3 || i == 4)   /* idle, iowait */
                idle += v;
            p = end;
            rc = 0;
        }
        *pbusy = total - idle;
        *ptotal = total;
    }
    fclose(f);
    return rc;
}

/* Parses a whole decimal integer in [min, max]. Returns 0 or -EINVAL. */
static int parse_int(const char *text, int min, int max, int *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < min || v > max)
        return -EINVAL;
    *out = (int)v;
    return 0;
}

/* ---- the load ---- */

static void flight_send(struct flight *f);

static void record(struct flight *f, const struct limiter_result *res)
{
    struct master *m = f->m;
    m->inflight--;
    m->now.done++;
    if (res->status != LIMITER_DECIDED)
        m->now.unavailable++;
    else if (res->allowed)
        m->now.allowed++;
    else
        m->now.rejected++;
    if (f->load->phase == PHASE_MEASURE && res->status == LIMITER_DECIDED) {
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double us = ts_diff_s(&f->sent, &now) * 1e6;
        size_t b = us < 0 ? 0 : us >= (double)(LATENCY_BUCKETS - 1) ? LATENCY_BUCKETS - 1 : (size_t)us;
        m->latency_us[b]++;
        m->latency_count++;
    }
}

static void retry_later(struct flight *f)
{
    struct timeval tv = {0, UNAVAILABLE_RETRY_MS * 1000};
    evtimer_add(f->retry, &tv);
}

static void on_check_done(void *arg, const struct limiter_result *res)
{
    struct flight *f = arg;
    record(f, res);
    if (f->in_check) {
        /* answered before limiter_check returned: flight_send loops, no recursion */
        f->answered_in_check = true;
        f->unavailable_in_check = res->status != LIMITER_DECIDED;
        return;
    }
    if (res->status != LIMITER_DECIDED)
        retry_later(f);   /* the store is away: do not spin on it */
    else
        flight_send(f);
}

static void flight_send(struct flight *f)
{
    struct master *m = f->m;
    while (f->load->phase != PHASE_DRAIN && f->load->phase != PHASE_CONNECT) {
        const char *subject = m->subjects[m->next_subject];
        m->next_subject = (m->next_subject + 1) % m->subject_count;
        f->in_check = true;
        f->answered_in_check = false;
        clock_gettime(CLOCK_MONOTONIC, &f->sent);
        m->inflight++;
        int r = limiter_check(m->limiter, subject, strlen(subject), PLAN, PLAN_RULES, -1, on_check_done, f);
        f->in_check = false;
        if (r != 0) {
            m->inflight--;
            m->now.send_failed++;
            retry_later(f);
            return;
        }
        if (!f->answered_in_check)
            return;   /* the reply sends the next */
        if (f->unavailable_in_check) {
            retry_later(f);
            return;
        }
    }
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    flight_send(arg);
}

static void start_flights(struct load *load)
{
    for (int i = 0; i < load->master_count * load->opt.inflight; i++)
        flight_send(&load->flights[i]);
}

static void phase_in(struct load *load, enum phase phase, int64_t after_ms)
{
    load->phase = phase;
    load->phase_started_ms = mono_ms();
    struct timeval tv = {after_ms / 1000, (after_ms % 1000) * 1000};
    evtimer_add(load->phase_timer, &tv);
}

static void snapshot_counters(struct load *load, bool end)
{
    for (int i = 0; i < load->master_count; i++) {
        struct master *m = &load->masters[i];
        if (end)
            m->at_end = m->now;
        else
            m->at_start = m->now;
    }
}

static void on_phase_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct load *load = arg;
    switch (load->phase) {
    case PHASE_CONNECT: {
        bool all = true;
        for (int i = 0; i < load->master_count; i++)
            all &= limiter_available(load->masters[i].limiter);
        if (all) {
            fprintf(stderr, "cluster_load: connected; warm-up %d s\n", load->opt.warmup_s);
            phase_in(load, PHASE_WARMUP, (int64_t)load->opt.warmup_s * 1000);
            start_flights(load);
        } else if (mono_ms() - load->phase_started_ms > CONNECT_WAIT_MS) {
            fprintf(stderr, "cluster_load: a master did not become ready in %d ms\n", CONNECT_WAIT_MS);
            load->failed = true;
            event_base_loopbreak(load->base);
        } else {
            struct timeval tv = {0, 10000};
            evtimer_add(load->phase_timer, &tv);
        }
        break;
    }
    case PHASE_WARMUP:
        /* the blocking INFO reads pause the loop for a moment: counters read after them */
        read_all_stats(load, false);
        snapshot_counters(load, false);
        getrusage(RUSAGE_SELF, &load->ru_start);
        load->box_ok = box_cpu(&load->box_busy[0], &load->box_total[0]) == 0;
        clock_gettime(CLOCK_MONOTONIC, &load->measure_start);
        fprintf(stderr, "cluster_load: measuring %d s\n", load->opt.duration_s);
        phase_in(load, PHASE_MEASURE, (int64_t)load->opt.duration_s * 1000);
        break;
    case PHASE_MEASURE:
        clock_gettime(CLOCK_MONOTONIC, &load->measure_end);
        getrusage(RUSAGE_SELF, &load->ru_end);
        load->box_ok &= box_cpu(&load->box_busy[1], &load->box_total[1]) == 0;
        snapshot_counters(load, true);
        read_all_stats(load, true);
        phase_in(load, PHASE_DRAIN, 10);
        break;
    case PHASE_DRAIN: {
        int left = 0;
        for (int i = 0; i < load->master_count; i++)
            left += load->masters[i].inflight;
        if (left == 0) {
            event_base_loopbreak(load->base);
        } else if (mono_ms() - load->phase_started_ms > DRAIN_WAIT_MS) {
            fprintf(stderr, "cluster_load: %d checks still unanswered after %d ms\n", left, DRAIN_WAIT_MS);
            event_base_loopbreak(load->base);
        } else {
            struct timeval tv = {0, 10000};
            evtimer_add(load->phase_timer, &tv);
        }
        break;
    }
    }
}

/* ---- report ---- */

static double percentile_us(const struct master *m, double q)
{
    if (m->latency_count == 0)
        return 0;
    uint64_t rank = (uint64_t)(q * (double)(m->latency_count - 1)), seen = 0;
    for (size_t b = 0; b < LATENCY_BUCKETS; b++) {
        seen += m->latency_us[b];
        if (seen > rank)
            return (double)b;
    }
    return (double)(LATENCY_BUCKETS - 1);
}

static double replica_cpu_s(const struct master *m)
{
    double s = 0;
    for (int j = 0; j < m->replica_count; j++)
        if (m->replica_before[j].ok && m->replica_after[j].ok)
            s += m->replica_after[j].cpu_s - m->replica_before[j].cpu_s;
    return s;
}

struct totals {
    uint64_t checks, unavail, rejected, failed, evalsha;
    double cpu, usec, replica_cpu;
    bool stats_ok;
};

/* One master's row and RESULT line, added to t. */
static void report_master(const struct master *m, double wall, struct totals *t)
{
    uint64_t checks = m->at_end.allowed + m->at_end.rejected - m->at_start.allowed - m->at_start.rejected;
    uint64_t unavail = m->at_end.unavailable - m->at_start.unavailable;
    uint64_t failed = m->at_end.send_failed - m->at_start.send_failed;
    uint64_t rejected = m->at_end.rejected - m->at_start.rejected;
    bool ok = m->before.ok && m->after.ok;
    long long calls = ok ? m->after.evalsha_calls - m->before.evalsha_calls : 0;
    long long usec = ok ? m->after.evalsha_usec - m->before.evalsha_usec : 0;
    long long evals = ok ? m->after.eval_calls - m->before.eval_calls : 0;
    double cpu = ok ? m->after.cpu_s - m->before.cpu_s : 0;
    double rcpu = replica_cpu_s(m);
    double per = checks > 0 ? 1e6 / (double)checks : 0;
    printf("%-22s %6" PRIu32 " %10.0f %9" PRIu64 " %8" PRIu64 " %8.0f %8.0f %8lld %11.2f %12.2f %11.2f\n",
           m->name, m->slots_owned, (double)checks / wall, rejected, unavail + failed, percentile_us(m, 0.5),
           percentile_us(m, 0.99), calls, cpu * per, calls > 0 ? (double)usec / (double)calls : 0, rcpu * per);
    printf("RESULT master=%s slots=%" PRIu32 " checks=%" PRIu64 " wall_s=%.3f checks_per_s=%.1f rejected=%" PRIu64
           " unavailable=%" PRIu64 " send_failed=%" PRIu64 " p50_us=%.0f p90_us=%.0f p99_us=%.0f"
           " evalsha_calls=%lld eval_calls=%lld evalsha_usec=%lld redis_cpu_s=%.3f redis_cpu_us_per_check=%.3f"
           " evalsha_us_per_call=%.3f replicas=%d replica_cpu_s=%.3f replica_cpu_us_per_check=%.3f"
           " redis_cpu_pct=%.1f stats_ok=%d\n",
           m->name, m->slots_owned, checks, wall, (double)checks / wall, rejected, unavail, failed,
           percentile_us(m, 0.5), percentile_us(m, 0.9), percentile_us(m, 0.99), calls, evals, usec, cpu, cpu * per,
           calls > 0 ? (double)usec / (double)calls : 0, m->replica_count, rcpu, rcpu * per, 100 * cpu / wall,
           ok ? 1 : 0);
    t->stats_ok &= ok;
    t->checks += checks;
    t->unavail += unavail;
    t->failed += failed;
    t->rejected += rejected;
    t->evalsha += (uint64_t)(calls > 0 ? calls : 0);
    t->cpu += cpu;
    t->usec += (double)usec;
    t->replica_cpu += rcpu;
}

/* The box's busy CPU over the window, in % of one core (-1: not read). */
static double box_busy_pct(const struct load *load)
{
    if (!load->box_ok || load->box_total[1] <= load->box_total[0] || load->ncpu <= 0)
        return -1;
    return 100.0 * (double)load->ncpu * (double)(load->box_busy[1] - load->box_busy[0]) /
           (double)(load->box_total[1] - load->box_total[0]);
}

/* The total row and RESULT line, and where the box's CPU went: the Redis servers measured
 * here, this program, and everything else (other processes, or the idle masters of the
 * cluster that take no load in this run). */
static void report_totals(const struct load *load, const struct totals *t, double wall, double gen_cpu)
{
    double per = t->checks > 0 ? 1e6 / (double)t->checks : 0;
    double us_per_call = t->evalsha > 0 ? t->usec / (double)t->evalsha : 0;
    printf("%-22s %6s %10.0f %9" PRIu64 " %8" PRIu64 " %8s %8s %8" PRIu64 " %11.2f %12.2f %11.2f\n", "total", "",
           (double)t->checks / wall, t->rejected, t->unavail + t->failed, "", "", t->evalsha, t->cpu * per,
           us_per_call, t->replica_cpu * per);
    double box_pct = box_busy_pct(load);
    double other_pct = box_pct < 0 ? -1 : box_pct - 100 * (t->cpu + t->replica_cpu + gen_cpu) / wall;
    printf("# this generator: %.1f%% of a core, %.2f us CPU per check\n", 100 * gen_cpu / wall, gen_cpu * per);
    printf("# box: %.0f%% busy of %ld00%%; Redis servers measured %.0f%% (masters %.0f%%, replicas %.0f%%), "
           "this generator %.0f%%, everything else %.0f%%\n",
           box_pct, load->ncpu, 100 * (t->cpu + t->replica_cpu) / wall, 100 * t->cpu / wall,
           100 * t->replica_cpu / wall, 100 * gen_cpu / wall, other_pct);
    printf("RESULT master=total masters=%d checks=%" PRIu64 " wall_s=%.3f checks_per_s=%.1f rejected=%" PRIu64
           " unavailable=%" PRIu64 " send_failed=%" PRIu64 " evalsha_calls=%" PRIu64
           " redis_cpu_s=%.3f redis_cpu_us_per_check=%.3f evalsha_us_per_call=%.3f replica_cpu_s=%.3f"
           " replica_cpu_us_per_check=%.3f gen_cpu_s=%.3f gen_cpu_us_per_check=%.3f gen_cpu_pct=%.1f"
           " inflight_per_master=%d subjects_per_master=%d box_busy_pct=%.1f other_cpu_pct=%.1f ncpu=%ld stats_ok=%d\n",
           load->master_count, t->checks, wall, (double)t->checks / wall, t->rejected, t->unavail, t->failed,
           t->evalsha, t->cpu, t->cpu * per, us_per_call, t->replica_cpu, t->replica_cpu * per, gen_cpu,
           gen_cpu * per, 100 * gen_cpu / wall, load->opt.inflight, load->opt.subjects, box_pct, other_pct,
           load->ncpu, t->stats_ok ? 1 : 0);
    if (!t->stats_ok)
        printf("# some INFO reads failed: their Redis CPU columns are 0\n");
}

static void report(const struct load *load)
{
    double wall = ts_diff_s(&load->measure_start, &load->measure_end);
    double gen_cpu = rusage_cpu_s(&load->ru_end) - rusage_cpu_s(&load->ru_start);
    printf("# plan: %s; %d checks in flight per master, %d subjects per master, warm-up %d s, measured %.2f s\n",
           PLAN_TEXT, load->opt.inflight, load->opt.subjects, load->opt.warmup_s, wall);
    printf("%-22s %6s %10s %9s %8s %8s %8s %8s %11s %12s %11s\n", "master", "slots", "checks/s", "rejected",
           "errors", "p50_us", "p99_us", "evalsha", "cpu_us/chk", "script_us/ck", "repl_us/chk");
    struct totals t = {.stats_ok = true};
    for (int i = 0; i < load->master_count; i++)
        report_master(&load->masters[i], wall, &t);
    report_totals(load, &t, wall, gen_cpu);
}

/* ---- main ---- */

static void usage(FILE *out)
{
    fprintf(out,
            "usage: cluster_load [options] redis://HOST:PORT [redis://HOST:PORT ...]\n"
            "  Each URL is a Redis Cluster master (or a plain Redis, which takes any subject).\n"
            "  -k, --inflight K     checks in flight per master (default 64, 1..4096)\n"
            "  -s, --subjects N     subjects per master (default 10000, 1..1000000)\n"
            "  -d, --duration S     measured seconds (default 10, 1..3600)\n"
            "  -w, --warmup S       unrecorded seconds before (default 2, 0..600)\n"
            "  -t, --timeout-ms MS  the limiter's command timeout (default 1000)\n"
            "  -p, --prefix P       key prefix, as [limits] key_prefix (default tierproxy:)\n"
            "  Plan: %s (rate rules only).\n",
            PLAN_TEXT);
}

/* The master of URL url (the n-th given), named "host:port". */
static int add_master(struct load *load, const char *url, int n)
{
    struct master *m = &load->masters[load->master_count];
    char err[256];
    if (redis_url_parse(url, &m->url, err, sizeof(err)) != 0) {
        fprintf(stderr, "cluster_load: master %d: %s\n", n, err);
        return -1;
    }
    if (m->url.is_unix || m->url.db != 0) {
        fprintf(stderr, "cluster_load: master %d: a redis://host:port URL of database 0, please\n", n);
        return -1;
    }
    m->index = load->master_count++;
    char name[sizeof(m->name)];   /* not m->url into m->name directly: gcc's -Wrestrict */
    snprintf(name, sizeof(name), "%s:%d", m->url.host, m->url.port);
    memcpy(m->name, name, sizeof(name));
    for (int j = 0; j < m->index; j++)
        if (same_node(m->url.host, m->url.port, &load->masters[j])) {
            fprintf(stderr, "cluster_load: %s given twice\n", m->name);
            return -1;
        }
    return 0;
}

static int parse_options(int argc, char **argv, struct load *load)
{
    static const struct option longopts[] = {
        {"inflight", required_argument, NULL, 'k'}, {"subjects", required_argument, NULL, 's'},
        {"duration", required_argument, NULL, 'd'}, {"warmup", required_argument, NULL, 'w'},
        {"timeout-ms", required_argument, NULL, 't'}, {"prefix", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0},
    };
    struct options *o = &load->opt;
    *o = (struct options){.inflight = 64, .subjects = 10000, .duration_s = 10, .warmup_s = 2,
                          .timeout_ms = 1000, .prefix = "tierproxy:"};
    int c;
    while ((c = getopt_long(argc, argv, "k:s:d:w:t:p:h", longopts, NULL)) != -1) {
        int r = 0;
        switch (c) {
        case 'k': r = parse_int(optarg, 1, 4096, &o->inflight); break;
        case 's': r = parse_int(optarg, 1, 1000000, &o->subjects); break;
        case 'd': r = parse_int(optarg, 1, 3600, &o->duration_s); break;
        case 'w': r = parse_int(optarg, 0, 600, &o->warmup_s); break;
        case 't': r = parse_int(optarg, 1, 600000, &o->timeout_ms); break;
        case 'p':
            if (strlen(optarg) > 200) {
                fprintf(stderr, "cluster_load: --prefix longer than 200 bytes\n");
                return -1;
            }
            o->prefix = optarg;
            break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (r != 0) {
            fprintf(stderr, "cluster_load: bad number \"%s\" for -%c\n", optarg, c);
            return -1;
        }
    }
    if (optind >= argc) {
        usage(stderr);
        return -1;
    }
    if (argc - optind > MAX_MASTERS) {
        fprintf(stderr, "cluster_load: at most %d masters\n", MAX_MASTERS);
        return -1;
    }
    for (int i = optind; i < argc; i++)
        if (add_master(load, argv[i], i - optind + 1) != 0)
            return -1;
    return 0;
}

/* Master i's limiter (from the URL as given, credentials included: limiter_redis parses
 * it as the proxy does) and its checks in flight. */
static int start_master(struct load *load, int i, const char *url)
{
    struct master *m = &load->masters[i];
    char err[256];
    struct redis_store_options ro = {.url = url, .key_prefix = load->opt.prefix,
                                     .command_timeout_ms = load->opt.timeout_ms, .lease_ttl_ms = 0};
    m->limiter = limiter_redis_create(load->base, &ro, err, sizeof(err));
    m->latency_us = calloc(LATENCY_BUCKETS, sizeof(*m->latency_us));
    if (m->limiter == NULL || m->latency_us == NULL) {
        fprintf(stderr, "cluster_load: %s: %s\n", m->name, m->limiter ? "out of memory" : err);
        return -1;
    }
    fprintf(stderr, "cluster_load: %s: %s, %" PRIu32 " slots, %zu subjects, %d replicas\n", m->name,
            m->cluster ? "cluster master" : "plain redis", m->slots_owned, m->subject_count, m->replica_count);
    for (int k = 0; k < load->opt.inflight; k++) {
        struct flight *f = &load->flights[i * load->opt.inflight + k];
        f->m = m;
        f->load = load;
        f->retry = evtimer_new(load->base, on_retry, f);
        if (f->retry == NULL) {
            fprintf(stderr, "cluster_load: out of memory\n");
            return -1;
        }
    }
    return 0;
}

static void load_free(struct load *load)
{
    for (int i = 0; i < load->master_count; i++) {
        struct master *m = &load->masters[i];
        if (m->limiter)
            limiter_destroy(m->limiter);
        free(m->subjects);
        free(m->latency_us);
        explicit_bzero(&m->url, sizeof(m->url));   /* the password, if any */
    }
    if (load->flights) {
        for (int i = 0; i < load->master_count * load->opt.inflight; i++)
            if (load->flights[i].retry)
                event_free(load->flights[i].retry);
        free(load->flights);
    }
    if (load->phase_timer)
        event_free(load->phase_timer);
    if (load->base)
        event_base_free(load->base);
}

int main(int argc, char **argv)
{
    static struct load load;     /* large (slot owners, replicas): not on the stack */
    static int8_t owner[CLUSTER_SLOT_COUNT];
    int rc = 1;
    signal(SIGPIPE, SIG_IGN);
    load.ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (parse_options(argc, argv, &load) != 0)
        return 2;
    if (learn_slots(&load, owner) != 0 || pick_subjects(&load, owner) != 0)
        goto out;
    load.base = event_base_new();
    load.phase_timer = load.base ? evtimer_new(load.base, on_phase_timer, &load) : NULL;
    load.flights = calloc((size_t)load.master_count * (size_t)load.opt.inflight, sizeof(*load.flights));
    if (load.phase_timer == NULL || load.flights == NULL) {
        fprintf(stderr, "cluster_load: out of memory\n");
        goto out;
    }
    for (int i = 0; i < load.master_count; i++)
        if (start_master(&load, i, argv[optind + i]) != 0)
            goto out;
    phase_in(&load, PHASE_CONNECT, 10);
    event_base_dispatch(load.base);
    if (!load.failed) {
        report(&load);
        rc = 0;
    }
out:
    load_free(&load);
    return rc;
}
