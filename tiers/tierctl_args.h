/* tierctl's argument layer. A table of commands and a table of flags are the one source of
 * usage text and of what each command takes; cli_parse reads the command line against them
 * and answers --help for the whole program, for a group of commands ("plan", "user
 * limit") or for one command, so that help and flag handling are one code path.
 *
 * Flags may come anywhere: before the command, between its words, among its arguments
 * ("--" ends them). A flag with a value takes "--name VALUE" or "--name=VALUE"; a switch
 * (no value) is present, or given as "--name=BOOLEAN". BOOLEAN, wherever tierctl reads
 * one, is yes/no, on/off, true/false or 1/0, in any case.
 *
 * The two ways out with an error live here too: cli_fail (refused, exit 1) and
 * cli_usage_error (bad usage, exit 2, with the command's usage line).
 *
 * Two passes: the first parts argv into flags (a flag with a value takes the next word,
 * whatever it looks like, as getopt does) and words; the words then name the command (the
 * longest row they begin with), and only then are the flags checked against it. --help (or
 * -h, or "help" as the first word) anywhere prints the help of what the words name before
 * anything else is checked; words that name nothing stay bad usage. A flag given twice is
 * bad usage unless the command's row lets it repeat (--rate in plan add/set, limit add,
 * user limit add, simulate; up to 4) or it is global (--db, --config: the last one wins).
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CLI_EXIT_REFUSED 1
#define CLI_EXIT_USAGE 2
#define CLI_MAX_POSITIONAL 4
#define CLI_MAX_FLAGS 32                /* flag ids are 0 .. CLI_MAX_FLAGS - 1 */
#define CLI_MAX_REPEAT 4                /* values a repeatable flag takes in one command */
#define CLI_FLAG(id) (1u << (id))

struct cli;                             /* the program's context, handed to a command */

struct cli_command {
    const char *words;                  /* "plan add", "user limit add" */
    const char *args;                   /* "NAME [LIMIT-FLAGS] [--priority P]" */
    const char *text;
    int (*run)(struct cli *c);
    int min_pos, max_pos;
    uint32_t flags;                     /* CLI_FLAG(id) of each flag it takes besides the global ones */
    uint32_t repeatable;                /* of those, the ones it takes more than once */
    int access;                         /* the program's: how run uses the catalog */
};

struct cli_flag {
    const char *name;                   /* "--rate" */
    const char *arg;                    /* "N/WINDOW"; NULL for a switch */
    const char *text;
    bool limit_flag;                    /* listed under LIMIT-FLAGS */
};

struct cli_spec {
    const struct cli_command *commands;
    size_t n_commands;
    const struct cli_flag *flags;       /* indexed by flag id; a row without a name is unused */
    size_t n_flags;
    uint32_t global;                    /* flags every command takes; the last one given wins */
    int help_flag, version_flag;        /* their ids */
    const char *synopsis;               /* "[--db PATH]": between the program and the command */
    const char *help_head;              /* the rest of --help's first line */
    const char *help_foot;              /* --help's closing lines */
};

/* A command line as read. */
struct cli_args {
    const struct cli_spec *spec;
    const struct cli_command *cmd;
    const char *pos[CLI_MAX_POSITIONAL];
    int npos;
    const char *flag[CLI_MAX_FLAGS];    /* the last value given, "" for a switch; NULL = absent */
    const char *values[CLI_MAX_FLAGS][CLI_MAX_REPEAT];   /* every value given, in order */
    int count[CLI_MAX_FLAGS];
};

#define CLI_RUN 0                       /* run a->cmd */
#define CLI_HELPED (-1)                 /* help was printed on stdout: exit 0 */
#define CLI_VERSION (-2)                /* --version was asked for */

/* Reads argv (argc > 0) against spec into *a (spec must outlive it). Returns CLI_RUN,
 * CLI_HELPED, CLI_VERSION, or CLI_EXIT_USAGE after saying why on stderr. */
int cli_parse(const struct cli_spec *spec, int argc, char **argv, struct cli_args *a);

/* Writes --help for the whole program on stdout. */
void cli_print_help(const struct cli_spec *spec);

/* Refused: "tierctl: REASON", one line on stderr (control characters and bytes that are
 * not UTF-8 shown as '?'). Returns CLI_EXIT_REFUSED. */
__attribute__((format(printf, 1, 2)))
int cli_fail(const char *fmt, ...);

/* Bad usage: the reason and a's command's usage line (the program's without a command)
 * on stderr. Returns CLI_EXIT_USAGE. */
__attribute__((format(printf, 2, 3)))
int cli_usage_error(const struct cli_args *a, const char *fmt, ...);

/* A decimal whole number in [min, max], digits only. Returns 0 or -EINVAL. */
int cli_parse_int(const char *text, int64_t min, int64_t max, int64_t *pv);

/* A BOOLEAN (above). Returns 0 or -EINVAL. */
int cli_parse_bool(const char *text, bool *pv);
