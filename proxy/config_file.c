/* The INI file of tierproxy's configuration. See config_file.h.
 *
 * libinih 55 stops at or only records the first line it cannot parse, and passes no line
 * numbers to the handler; so the reader here hands it the file line by line, counting
 * them, and screens each one first: a line inih would refuse (no '=' or ':', a '[' without
 * ']'), an overlong line, or an unknown [section] that holds no keys is reported here with
 * its line, and inih gets a blank line instead, so the rest of the file is still read. */
#include "proxy/config_file.h"

#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Longest line accepted in the INI file; longer lines are an error naming the line. */
#define CONFIG_LINE_MAX 16384

static size_t edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b), prev[64], cur[64];
    if (la >= 63 || lb >= 63)
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        prev[j] = j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            size_t del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        memcpy(prev, cur, (lb + 1) * sizeof(prev[0]));
    }
    return prev[lb];
}

/* "; did you mean "listen"?" for a key close to one of the section's keys, else "". */
static void suggest_key(const char *section, const char *key, char *buf, size_t buflen)
{
    const char *best = NULL;
    size_t best_d = 3;
    buf[0] = '\0';
    for (size_t i = 0; i < config_n_directives; i++) {
        if (strcmp(config_directives[i].section, section) != 0)
            continue;
        size_t dist = edit_distance(key, config_directives[i].key);
        if (dist < best_d) {
            best_d = dist;
            best = config_directives[i].key;
        }
    }
    if (best)
        snprintf(buf, buflen, "; did you mean \"%s\"?", best);
}

/* ---------------------------------------------------------------- the INI file */

#define KNOWN_SECTIONS "(known: proxy, admin, auth, plans, limits, log)"

/* ---------------------------------------------------------------- the reader */

struct ini_source {
    FILE *f;
    const char *path;
    char *line;      /* CONFIG_LINE_MAX + 2 bytes */
    size_t len, pos; /* the current line, and how much of it went out */
    int lineno;
    int rc;          /* -EIO or -ENOMEM: reading stopped */
    struct config_report *report;
    int *set_on_line; /* per directive: the line that set it, or 0 */
    struct proxy_config *cfg;
    char unknown_section[64]; /* the last [section] header, when unknown */
    int unknown_line;         /* its line, or 0 */
    bool unknown_said;        /* a key in it was reported: the section was named then */
};

static void report_line(struct ini_source *s, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report_line(struct ini_source *s, int line, const char *fmt, ...)
{
    char where[1100], why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(where, sizeof(where), "%s:%d", s->path, line);
    config_report(s->report, where, "%s", why);
}

/* The end of a [section]: one that is unknown and held no key is reported now. */
static void section_ends(struct ini_source *s)
{
    char q[CONFIG_QUOTE_MAX + 8];
    if (s->unknown_line && !s->unknown_said)
        report_line(s, s->unknown_line, "unknown section [%s] " CONFIG_KNOWN_SECTIONS,
                    config_quote(s->unknown_section, q, sizeof(q)));
    s->unknown_line = 0;
    s->unknown_said = false;
}

/* A [section] header: ends the one before; an unknown one is remembered. */
static void section_starts(struct ini_source *s, const char *open, const char *close)
{
    char name[sizeof(s->unknown_section)];
    size_t nlen = (size_t)(close - open - 1);
    section_ends(s);
    if (nlen >= sizeof(name))
        nlen = sizeof(name) - 1;
    memcpy(name, open + 1, nlen);
    name[nlen] = '\0';
    if (!config_known_section(config_trim(name))) {
        snprintf(s->unknown_section, sizeof(s->unknown_section), "%s", config_trim(name));
        s->unknown_line = s->lineno;
    }
}

/* Screens a new line. Returns false for one inih would refuse, reported. */
static bool screen_line(struct ini_source *s)
{
    const char *p = s->line;
    if (s->lineno == 1 && strncmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    p += strspn(p, " \t\r\v\f");
    if (*p == '\0' || *p == '\n' || *p == ';' || *p == '#')
        return true;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (close != NULL) {
            section_starts(s, p, close);
            return true;
        }
    } else if (strpbrk(p, "=:") != NULL) {
        return true;
    }
    report_line(s, s->lineno, "expected [section] or key = value");
    return false;
}

/* The rest of an overlong line is read and dropped. Returns 0 or -EIO. */
static int skip_rest_of_line(struct ini_source *s)
{
    int c;
    while ((c = fgetc(s->f)) != EOF && c != '\n')
        ;
    return ferror(s->f) ? -EIO : 0;
}

/* Reads the next line into s->line; a line to skip becomes "\n". Returns false at the end. */
static bool next_line(struct ini_source *s)
{
    if (fgets(s->line, CONFIG_LINE_MAX + 2, s->f) == NULL) {
        if (ferror(s->f)) {
            report_line(s, s->lineno, "read error after this line");
            s->rc = -EIO;
        }
        section_ends(s);
        return false;
    }
    s->lineno++;
    s->len = strlen(s->line);
    s->pos = 0;
    bool keep;
    if (s->len > CONFIG_LINE_MAX && s->line[s->len - 1] != '\n') {
        report_line(s, s->lineno, "line longer than %d bytes", CONFIG_LINE_MAX);
        s->rc = skip_rest_of_line(s);
        keep = false;
    } else {
        keep = screen_line(s);
    }
    if (!keep) {
        strcpy(s->line, "\n");
        s->len = 1;
    }
    return s->rc == 0;
}

/* An fgets-style reader for ini_parse_stream. */
static char *ini_source_read(char *str, int num, void *stream)
{
    struct ini_source *s = stream;
    if (s->rc || num < 2)
        return NULL;
    if (s->pos >= s->len && !next_line(s))
        return NULL;
    size_t k = s->len - s->pos;
    if (k > (size_t)num - 1)
        k = (size_t)num - 1;
    memcpy(str, s->line + s->pos, k);
    str[k] = '\0';
    s->pos += k;
    return str;
}

/* ---------------------------------------------------------------- the handler */

/* key = value in a section that is not known: said once for the section. */
static void unknown_section_key(struct ini_source *s, const char *section, const char *key)
{
    char qs[CONFIG_QUOTE_MAX + 8], q[CONFIG_QUOTE_MAX + 8];
    if (!s->unknown_said)
        report_line(s, s->lineno, "unknown section [%s] for key \"%s\" " CONFIG_KNOWN_SECTIONS,
                    config_quote(section, qs, sizeof(qs)), config_quote(key, q, sizeof(q)));
    s->unknown_said = true;
}

static int ini_source_handler(void *user, const char *section_raw, const char *key, const char *value)
{
    struct ini_source *s = user;
    char section_buf[64], *section, why[1024], hint[64], q[CONFIG_QUOTE_MAX + 8], where[1200];

    snprintf(section_buf, sizeof(section_buf), "%s", section_raw);
    section = config_trim(section_buf);
    if (section[0] == '\0') {
        report_line(s, s->lineno, "key \"%s\" outside any [section]", config_quote(key, q, sizeof(q)));
        return 1;
    }
    if (!config_known_section(section)) {
        unknown_section_key(s, section, key);
        return 1;
    }
    const struct directive *d = config_find_directive(section, key);
    if (d == NULL) {
        suggest_key(section, key, hint, sizeof(hint));
        report_line(s, s->lineno, "unknown key \"%s\" in [%s]%s", config_quote(key, q, sizeof(q)), section, hint);
        return 1;
    }
    size_t idx = (size_t)(d - config_directives);
    snprintf(where, sizeof(where), "%s:%d: [%s] %s", s->path, s->lineno, d->section, d->key);
    if (s->set_on_line[idx]) {
        config_report(s->report, where, "set twice (first on line %d)", s->set_on_line[idx]);
        return 1;
    }
    s->set_on_line[idx] = s->lineno;
    int r = config_directive_set(d, s->cfg, value, why, sizeof(why));
    if (r == 0)
        r = config_set_origin(s->cfg, d, ORIGIN_FILE, s->lineno, NULL, value);
    if (r == -ENOMEM) {
        config_report(s->report, where, "out of memory");
        s->rc = -ENOMEM;
        return 0;
    }
    if (r) {
        config_report(s->report, where, "%s", why);
        return 1;
    }
    s->cfg->file_settings++;
    return 1;
}

/* ---------------------------------------------------------------- libinih's options */

/* libinih 55 as packaged keeps its options in globals: set ours for the parse and put the
 * previous values back afterwards. Not thread-safe; configuration loads on one thread. */
struct inih_options {
    bool multiline, inline_comments, use_stack, realloc_, stop_on_first_error, no_value, bom;
    char *inline_prefixes, *start_prefixes;
    int max_line, initial_alloc;
};

static void inih_options_swap(struct inih_options *o)
{
    struct inih_options cur = {
        ini_allow_multiline, ini_allow_inline_comments, ini_use_stack, ini_allow_realloc,
        ini_stop_on_first_error, ini_allow_no_value, ini_allow_bom, ini_inline_comment_prefixes,
        ini_start_comment_prefixes, ini_max_line, ini_initial_alloc,
    };
    ini_allow_multiline = o->multiline;
    ini_allow_inline_comments = o->inline_comments;
    ini_use_stack = o->use_stack;
    ini_allow_realloc = o->realloc_;
    ini_stop_on_first_error = o->stop_on_first_error;
    ini_allow_no_value = o->no_value;
    ini_allow_bom = o->bom;
    ini_inline_comment_prefixes = o->inline_prefixes;
    ini_start_comment_prefixes = o->start_prefixes;
    ini_max_line = o->max_line;
    ini_initial_alloc = o->initial_alloc;
    *o = cur;
}

int config_file_load(struct proxy_config *cfg, const char *path, struct config_report *report)
{
    static char inline_prefixes[] = ";", start_prefixes[] = ";#";
    struct inih_options opts = {
        .multiline = false,      /* an indented line is not a continuation */
        .inline_comments = true, /* "key = value   ; comment" */
        .use_stack = false,
        .realloc_ = true, /* lines up to CONFIG_LINE_MAX, not 200 bytes */
        .stop_on_first_error = false,
        .no_value = false,
        .bom = true,
        .inline_prefixes = inline_prefixes,
        .start_prefixes = start_prefixes,
        .max_line = CONFIG_LINE_MAX + 3,
        .initial_alloc = 256,
    };
    struct ini_source s = {.path = path, .report = report, .cfg = cfg};

    s.f = fopen(path, "r");
    if (s.f == NULL) {
        int e = errno;
        config_report(report, "", "cannot open config file \"%s\": %s", path, strerror(e));
        return e == ENOMEM ? -ENOMEM : 0;
    }
    s.line = malloc(CONFIG_LINE_MAX + 2);
    s.set_on_line = calloc(config_n_directives, sizeof(*s.set_on_line));
    if (s.line == NULL || s.set_on_line == NULL) {
        config_report(report, "", "out of memory");
        s.rc = -ENOMEM;
    } else {
        inih_options_swap(&opts);
        int r = ini_parse_stream(ini_source_read, &s, ini_source_handler, &s);
        inih_options_swap(&opts);
        if (r == -2 && s.rc == 0) {
            config_report(report, "", "out of memory");
            s.rc = -ENOMEM;
        } else if (r > 0 && s.rc == 0) {
            /* a line the screen let through and inih refused (its first only) */
            report_line(&s, r, "expected [section] or key = value");
        }
    }
    free(s.line);
    free(s.set_on_line);
    fclose(s.f);
    return s.rc == -ENOMEM ? -ENOMEM : 0;
}
