/* tierctl's argument layer (tierctl_args.h).
 *
 * cli_parse reads the command line in two passes: the first parts it into flags (each with
 * the value it consumes) and words, so that flags may stand anywhere; the words then name
 * the command (the longest row of the table they begin with) and give its arguments, and
 * only then are the flags checked against what that command takes. --help anywhere (or
 * "help" as the first word) prints the help of what the words name, before anything else
 * is checked. */
#include "tiers/tierctl_args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "store/catalog/utf8.h"

#define COMMAND_WIDTH 36
#define FLAG_WIDTH 24

/* ---- errors ---- */

/* Writes "tierctl: REASON" as one line of UTF-8 text: what it quotes from the command line
 * or the catalog may hold control characters or bytes that are not UTF-8 (each becomes '?'). */
static void say(const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof(line), fmt, ap);
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    utf8_repair(line, strlen(line));
    fprintf(stderr, "tierctl: %s\n", line);
}

int cli_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    return CLI_EXIT_REFUSED;
}

static void print_usage_line(FILE *f, const struct cli_spec *spec, const struct cli_command *cmd)
{
    if (cmd)
        fprintf(f, "usage: tierctl %s %s%s%s\n", spec->synopsis, cmd->words, cmd->args[0] ? " " : "", cmd->args);
    else
        fprintf(f, "usage: tierctl %s COMMAND ...   (tierctl --help lists the commands)\n", spec->synopsis);
}

int cli_usage_error(const struct cli_args *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(fmt, ap);
    va_end(ap);
    print_usage_line(stderr, a->spec, a->cmd);
    return CLI_EXIT_USAGE;
}

/* ---- values ---- */

int cli_parse_int(const char *text, int64_t min, int64_t max, int64_t *pv)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max || !(text[0] >= '0' && text[0] <= '9'))
        return -EINVAL;
    *pv = v;
    return 0;
}

int cli_parse_bool(const char *text, bool *pv)
{
    static const char *const yes[] = {"yes", "on", "true", "1"};
    static const char *const no[] = {"no", "off", "false", "0"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcasecmp(text, yes[i]) == 0 || strcasecmp(text, no[i]) == 0) {
            *pv = strcasecmp(text, yes[i]) == 0;
            return 0;
        }
    }
    return -EINVAL;
}

/* ---- the command words ---- */

static int count_words(const char *words)
{
    int n = 1;
    for (const char *p = words; (p = strchr(p, ' ')) != NULL; p++)
        n++;
    return n;
}

/* Whether cmd's words begin with the n words given (n = 0: every command does). */
static bool begins_with(const struct cli_command *cmd, const char *const *words, int n)
{
    const char *w = cmd->words;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(words[i]);
        if (!*w || strncmp(w, words[i], len) != 0 || (w[len] != ' ' && w[len] != '\0'))
            return false;
        w += len + (w[len] == ' ');
    }
    return true;
}

/* The command the words begin with (the one of most words), or NULL. */
static const struct cli_command *find_command(const struct cli_spec *spec, const char *const *words, int n)
{
    const struct cli_command *found = NULL;
    for (size_t i = 0; i < spec->n_commands; i++) {
        const struct cli_command *cmd = &spec->commands[i];
        int m = count_words(cmd->words);
        if (m <= n && begins_with(cmd, words, m) && (!found || m > count_words(found->words)))
            found = cmd;
    }
    return found;
}

/* How many of the words name a group of commands ("user limit": 2), 0 when none. */
static int group_depth(const struct cli_spec *spec, const char *const *words, int n)
{
    int depth = 0;
    for (size_t i = 0; i < spec->n_commands; i++) {
        const struct cli_command *cmd = &spec->commands[i];
        int m = count_words(cmd->words);
        for (int k = depth + 1; k <= n && k < m; k++)
            if (begins_with(cmd, words, k))
                depth = k;
    }
    return depth;
}

/* "user limit": the first k words, joined. */
static void join_words(const char *const *words, int k, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < k && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? " " : "", words[i]);
}

/* "plan add|set|list|show|remove ...": the group's words and what may follow them. */
static void group_synopsis(const struct cli_spec *spec, const char *const *words, int k, char *buf, size_t len)
{
    join_words(words, k, buf, len);
    size_t n = strlen(buf);
    const char *sep = " ";
    for (size_t i = 0; i < spec->n_commands && n < len; i++) {
        const struct cli_command *cmd = &spec->commands[i];
        if (count_words(cmd->words) <= k || !begins_with(cmd, words, k))
            continue;
        const char *rest = cmd->words;
        for (int w = 0; w < k; w++)
            rest = strchr(rest, ' ') + 1;
        n += (size_t)snprintf(buf + n, len - n, "%s%s", sep, rest);
        sep = "|";
    }
    if (n < len)
        snprintf(buf + n, len - n, " ...");
}

/* ---- help ---- */

static void print_row(const char *words, const char *args, const char *text, int width)
{
    char left[128];
    snprintf(left, sizeof(left), "%s%s%s", words, args && args[0] ? " " : "", args ? args : "");
    if ((int)strlen(left) <= width)
        printf("  %-*s %s\n", width, left, text);
    else
        printf("  %s\n  %-*s %s\n", left, width, "", text);
}

/* The commands of a group (k = 0: all). */
static void print_commands(const struct cli_spec *spec, const char *const *words, int k)
{
    for (size_t i = 0; i < spec->n_commands; i++) {
        const struct cli_command *cmd = &spec->commands[i];
        if (begins_with(cmd, words, k))
            print_row(cmd->words, cmd->args, cmd->text, COMMAND_WIDTH);
    }
}

/* The flags in mask: those listed under LIMIT-FLAGS (limit_flags) or the others. */
static void print_flags(const struct cli_spec *spec, uint32_t mask, bool limit_flags)
{
    for (size_t id = 0; id < spec->n_flags; id++) {
        const struct cli_flag *f = &spec->flags[id];
        if (f->name && (mask & CLI_FLAG(id)) && f->limit_flag == limit_flags)
            print_row(f->name, f->arg, f->text, FLAG_WIDTH);
    }
}

void cli_print_help(const struct cli_spec *spec)
{
    printf("usage: tierctl %s COMMAND ...%s\n", spec->synopsis, spec->help_head);
    print_commands(spec, NULL, 0);
    printf("LIMIT-FLAGS:\n");
    print_flags(spec, UINT32_MAX, true);
    printf("OTHER FLAGS:\n");
    print_flags(spec, UINT32_MAX, false);
    printf("%s", spec->help_foot);
}

static void print_group_help(const struct cli_spec *spec, const char *const *words, int k)
{
    char synopsis[256], group[128];
    group_synopsis(spec, words, k, synopsis, sizeof(synopsis));
    join_words(words, k, group, sizeof(group));
    printf("usage: tierctl %s %s\n", spec->synopsis, synopsis);
    print_commands(spec, words, k);
    printf("tierctl %s SUBCOMMAND --help: the flags one of them takes\n", group);
}

static void print_command_help(const struct cli_spec *spec, const struct cli_command *cmd)
{
    uint32_t mask = cmd->flags | spec->global | CLI_FLAG(spec->help_flag);
    bool limit_flags = false;
    for (size_t id = 0; id < spec->n_flags; id++)
        limit_flags |= (mask & CLI_FLAG(id)) && spec->flags[id].limit_flag;
    print_usage_line(stdout, spec, cmd);
    printf("  %s\n", cmd->text);
    if (limit_flags) {
        printf("LIMIT-FLAGS:\n");
        print_flags(spec, mask, true);
    }
    printf("FLAGS:\n");
    print_flags(spec, mask, false);
}

/* ---- reading the command line ---- */

/* The command line parted (the first pass). */
struct parted {
    const char **words;
    int nwords;
    int *flags;                         /* argv index of each flag */
    int nflags;
    bool help, version;
};

/* The id of flag arg ("--rate", "--rate=1/s", "-h"), or -1. */
static int flag_id(const struct cli_spec *spec, const char *arg)
{
    if (strcmp(arg, "-h") == 0)
        return spec->help_flag;
    size_t len = strcspn(arg, "=");
    for (size_t id = 0; id < spec->n_flags; id++) {
        const char *name = spec->flags[id].name;
        if (name && strlen(name) == len && strncmp(name, arg, len) == 0)
            return (int)id;
    }
    return -1;
}

static void part(const struct cli_spec *spec, int argc, char **argv, struct parted *p)
{
    bool flags_done = false;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!flags_done && strcmp(arg, "--") == 0) {
            flags_done = true;
            continue;
        }
        if (flags_done || arg[0] != '-' || arg[1] == '\0') {
            p->words[p->nwords++] = arg;
            continue;
        }
        p->flags[p->nflags++] = i;
        int id = flag_id(spec, arg);
        const char *eq = strchr(arg, '=');
        bool on = true;
        if (id < 0)
            continue;           /* said in the second pass, with the command's usage line */
        if (spec->flags[id].arg && !eq)
            i++;                /* its value, whatever it looks like */
        else if (eq && cli_parse_bool(eq + 1, &on) != 0)
            on = false;
        p->help |= id == spec->help_flag && on;
        p->version |= id == spec->version_flag && on;
    }
}

/* Records one flag's value. Returns 0 or the usage status, said why. */
static int record(struct cli_args *a, int id, const char *value)
{
    const struct cli_flag *f = &a->spec->flags[id];
    bool global = a->spec->global & CLI_FLAG(id);
    if (a->count[id] > 0 && !global && !(a->cmd->repeatable & CLI_FLAG(id)))
        return cli_usage_error(a, "%s given twice", f->name);
    if (a->count[id] < CLI_MAX_REPEAT)
        a->values[id][a->count[id]++] = value;
    else if (!global)
        return cli_usage_error(a, "%s given more than %d times", f->name, CLI_MAX_REPEAT);
    a->flag[id] = value;
    return 0;
}

/* The second pass: each flag against the command. */
static int read_flags(int argc, char **argv, const struct parted *p, struct cli_args *a)
{
    const struct cli_spec *spec = a->spec;
    for (int k = 0; k < p->nflags; k++) {
        int i = p->flags[k];
        const char *arg = argv[i], *eq = strchr(arg, '=');
        int id = flag_id(spec, arg);
        if (id < 0)
            return cli_usage_error(a, "unknown option \"%.*s\"", (int)strcspn(arg, "="), arg);
        const struct cli_flag *f = &spec->flags[id];
        if (id == spec->help_flag || id == spec->version_flag)
            continue;
        if (!(spec->global & CLI_FLAG(id)) && !(a->cmd->flags & CLI_FLAG(id)))
            return cli_usage_error(a, "%s does not take %s", a->cmd->words, f->name);
        if (f->arg && !eq && i + 1 >= argc)
            return cli_usage_error(a, "%s needs a value (%s)", f->name, f->arg);
        bool on = true;
        if (!f->arg && eq && cli_parse_bool(eq + 1, &on) != 0)
            return cli_usage_error(a, "%s takes no value (or =yes, =no), not \"%s\"", f->name, eq + 1);
        if (!on) {
            a->flag[id] = NULL;   /* --json=no: as if not given */
            continue;
        }
        int r = record(a, id, !f->arg ? "" : eq ? eq + 1 : argv[i + 1]);
        if (r)
            return r;
    }
    return 0;
}

/* Words that name no command: a usage error naming what is missing or unknown. */
static int command_error(struct cli_args *a, const char *const *words, int n)
{
    const struct cli_spec *spec = a->spec;
    int k = group_depth(spec, words, n);
    if (n == 0)
        return cli_usage_error(a, "no command given");
    if (k == 0)
        return cli_usage_error(a, "unknown command \"%s\"", words[0]);
    char synopsis[256], group[128];
    group_synopsis(spec, words, k, synopsis, sizeof(synopsis));
    join_words(words, k, group, sizeof(group));
    if (k < n)
        (void)cli_fail("unknown subcommand %s", words[k]);   /* the reason; the status is usage's */
    else
        (void)cli_fail("missing subcommand for %s", group);
    fprintf(stderr, "usage: tierctl %s %s\n", spec->synopsis, synopsis);
    return CLI_EXIT_USAGE;
}

/* Help for what the words name: a command, a group, or (none) the program. Returns
 * CLI_HELPED, or 0 when they name nothing. */
static int print_help_for(const struct cli_spec *spec, const struct cli_command *cmd, const char *const *words,
                          int n)
{
    if (cmd)
        print_command_help(spec, cmd);
    else if (n == 0)
        cli_print_help(spec);
    else if (group_depth(spec, words, n) == n)
        print_group_help(spec, words, n);
    else
        return 0;
    return CLI_HELPED;
}

static int read_command_line(int argc, char **argv, struct parted *p, struct cli_args *a)
{
    const char *const *words = p->words;
    int n = p->nwords;
    if (n > 0 && strcmp(words[0], "help") == 0) {
        p->help = true;
        words++;
        n--;
    }
    a->cmd = find_command(a->spec, words, n);
    if (p->help && print_help_for(a->spec, a->cmd, words, n))
        return CLI_HELPED;
    if (p->version)
        return CLI_VERSION;
    for (int k = 0; !a->cmd && k < p->nflags; k++) {
        const char *arg = argv[p->flags[k]];
        if (flag_id(a->spec, arg) < 0)   /* it may have parted a value from its flag */
            return cli_usage_error(a, "unknown option \"%.*s\"", (int)strcspn(arg, "="), arg);
    }
    if (!a->cmd)
        return command_error(a, words, n);
    for (int i = count_words(a->cmd->words); i < n; i++) {
        if (a->npos >= a->cmd->max_pos)
            return cli_usage_error(a, "unexpected argument \"%s\"", words[i]);
        a->pos[a->npos++] = words[i];
    }
    int r = read_flags(argc, argv, p, a);
    if (r)
        return r;
    if (a->npos < a->cmd->min_pos)
        return cli_usage_error(a, "missing arguments");
    return CLI_RUN;
}

int cli_parse(const struct cli_spec *spec, int argc, char **argv, struct cli_args *a)
{
    *a = (struct cli_args){.spec = spec};
    struct parted p = {.words = calloc((size_t)argc, sizeof(*p.words)), .flags = calloc((size_t)argc, sizeof(int))};
    int r;
    if (!p.words || !p.flags) {
        r = cli_fail("out of memory");
    } else {
        part(spec, argc, argv, &p);
        r = read_command_line(argc, argv, &p, a);
    }
    free(p.words);
    free(p.flags);
    return r;
}
