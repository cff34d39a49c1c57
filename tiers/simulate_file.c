/* simulate_file: reads an access log line by line into a simulation, replays it and writes
 * the report (simulate.h). */
#include "tiers/simulate.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define READ_BLOCK (1 << 20)
#define SHOWN_SKIPS 10

/* Reads lines of at most SIMULATE_MAX_LINE bytes through one fixed buffer. */
struct line_reader {
    FILE *f;
    char *buf;
    size_t cap, start, end;
    bool eof;
    int error;               /* errno of a failed read */
};

/* Reads more into the buffer from the file. Returns 0 (at the end: nothing read, eof set)
 * or -EIO. */
static int fill(struct line_reader *lr, size_t at)
{
    size_t n = fread(lr->buf + at, 1, lr->cap - at, lr->f);
    if (n == 0 && ferror(lr->f)) {
        lr->error = errno;
        return -EIO;
    }
    lr->eof = n == 0;
    lr->end = at + n;
    return 0;
}

/* Drops a line longer than the cap, up to and with its newline (nl, if already in the
 * buffer). Returns 1, or -EIO. */
static int drop_long_line(struct line_reader *lr, const char *nl)
{
    for (;;) {
        if (nl != NULL) {
            lr->start = (size_t)(nl - lr->buf) + 1;
            return 1;
        }
        lr->start = 0;
        if (fill(lr, 0) != 0)
            return -EIO;
        if (lr->eof)
            return 1;
        nl = memchr(lr->buf, '\n', lr->end);
    }
}

/* Returns 1 with the next line (*ptoo_long: it was longer than the cap and is not given;
 * *pcut: it had no newline, the end of the file came first), 0 at the end, -EIO. */
static int next_line(struct line_reader *lr, const char **pline, size_t *plen, bool *ptoo_long, bool *pcut)
{
    *ptoo_long = false;
    *pcut = false;
    for (;;) {
        size_t have = lr->end - lr->start;
        char *nl = memchr(lr->buf + lr->start, '\n', have);
        if (nl != NULL && (size_t)(nl - (lr->buf + lr->start)) <= SIMULATE_MAX_LINE) {
            *pline = lr->buf + lr->start;
            *plen = (size_t)(nl - *pline);
            lr->start += *plen + 1;
            return 1;
        }
        if (have > SIMULATE_MAX_LINE) {
            *ptoo_long = true;
            *plen = 0;
            return drop_long_line(lr, nl);
        }
        if (lr->eof) {
            if (have == 0)
                return 0;
            *pline = lr->buf + lr->start;
            *plen = have;
            *pcut = true;
            lr->start = lr->end;
            return 1;
        }
        memmove(lr->buf, lr->buf + lr->start, have);
        lr->start = 0;
        if (fill(lr, have) != 0)
            return -EIO;
    }
}

static bool blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
            return false;
    return true;
}

/* Adds every line of the log to sim, naming the first skipped ones on diag. Returns 0, or
 * -errno with one line in err. */
static int read_log(struct simulation *sim, struct line_reader *lr, const char *log_path, FILE *diag, char *err,
                    size_t errlen)
{
    uint64_t lineno = 0;
    const char *text;
    size_t len;
    bool too_long, cut;
    int r;
    while ((r = next_line(lr, &text, &len, &too_long, &cut)) == 1) {
        lineno++;
        char why[256];
        int added = 1;
        if (too_long) {
            simulation_skip(sim);
            snprintf(why, sizeof(why), "longer than %d bytes", SIMULATE_MAX_LINE);
        } else if (blank(text, len)) {
            continue;
        } else {
            added = simulation_add(sim, lineno, text, len, why, sizeof(why));
        }
        if (added < 0) {
            snprintf(err, errlen, "out of memory");
            return added;
        }
        if (added == 1 && simulation_counts(sim)->skipped <= SHOWN_SKIPS)
            fprintf(diag, "tierctl: %s:%" PRIu64 ": skipped: %s%s\n", log_path, lineno,
                    cut ? "incomplete last line, " : "", why);
    }
    if (r < 0)
        snprintf(err, errlen, "%s: %s", log_path, strerror(lr->error ? lr->error : EIO));
    return r;
}

/* Writes the report, JSON when json. Returns 0, or -errno with one line in err. */
static int write_report(const struct simulate_report *rep, const char *log_path, const char *against, bool json,
                        FILE *out, char *err, size_t errlen)
{
    int r = 0;
    if (json) {
        json_t *doc = simulate_report_json(rep, log_path, against);
        if (doc == NULL) {
            snprintf(err, errlen, "cannot build the JSON report (out of memory, or a name that is not UTF-8)");
            return -ENOMEM;
        }
        if (json_dumpf(doc, out, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0 || fputc('\n', out) == EOF)
            r = -EIO;
        json_decref(doc);
    } else {
        r = simulate_report_print(rep, log_path, against, out);
    }
    if (r != 0)
        snprintf(err, errlen, "cannot write the report");
    return r;
}

/* Replays what was read and writes the report. Returns 0, or -errno with one line in err. */
static int replay_and_report(struct simulation *sim, const char *log_path, const char *against, bool json,
                             FILE *out, FILE *diag, char *err, size_t errlen)
{
    const struct simulate_report *rep = simulation_counts(sim);
    if (rep->skipped > SHOWN_SKIPS)
        fprintf(diag, "tierctl: %s: %" PRIu64 " more lines skipped\n", log_path, rep->skipped - SHOWN_SKIPS);
    if (rep->skipped > 0 && rep->skipped == rep->lines) {
        snprintf(err, errlen, "%s: no access-log lines (%" PRIu64 " lines skipped)", log_path, rep->skipped);
        return -EINVAL;
    }
    if (simulation_run(sim, &rep) != 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    return write_report(rep, log_path, against, json, out, err, errlen);
}

int simulate_file(const char *log_path, const struct simulate_options *options, const char *against, bool json,
                  FILE *out, FILE *diag, char *err, size_t errlen)
{
    struct simulation *sim = NULL;
    struct line_reader lr = {.cap = READ_BLOCK + SIMULATE_MAX_LINE + 1};
    int r = simulation_create(options, &sim);
    if (r != 0) {
        snprintf(err, errlen, "%s", r == -ENOMEM ? "out of memory" : "invalid limits to simulate");
        return r;
    }
    lr.f = fopen(log_path, "r");
    if (lr.f == NULL) {
        r = -errno;
        snprintf(err, errlen, "%s: %s", log_path, strerror(errno));
    } else if ((lr.buf = malloc(lr.cap)) == NULL) {
        r = -ENOMEM;
        snprintf(err, errlen, "out of memory");
    } else if ((r = read_log(sim, &lr, log_path, diag, err, errlen)) == 0) {
        r = replay_and_report(sim, log_path, against, json, out, diag, err, errlen);
    }
    free(lr.buf);
    if (lr.f != NULL)
        fclose(lr.f);
    simulation_destroy(sim);
    return r;
}
