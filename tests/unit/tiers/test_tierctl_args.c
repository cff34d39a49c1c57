/* tierctl's argument layer (tiers/tierctl_args.h) on a small table of its own: flags
 * anywhere, repeats only where the table allows them, switches given as BOOLEAN, and
 * --help answered for the program, a group and a command. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "tiers/tierctl_args.h"

enum { RATE, JSON, DB, HELP, VERSION, N };

static const struct cli_command commands[] = {
    {"init", "", "create", NULL, 0, 0, 0, 0, 0},
    {"plan add", "NAME", "add", NULL, 1, 1, CLI_FLAG(RATE) | CLI_FLAG(JSON), CLI_FLAG(RATE), 0},
    {"plan list", "", "list", NULL, 0, 0, CLI_FLAG(JSON), 0, 0},
    {"user limit add", "USER", "own", NULL, 1, 1, CLI_FLAG(RATE), 0, 0},
};

static const struct cli_flag flags[N] = {
    [RATE] = {"--rate", "N/WINDOW", "a rate", true},
    [JSON] = {"--json", NULL, "JSON", false},
    [DB] = {"--db", "PATH", "the catalog", false},
    [HELP] = {"--help", NULL, "help", false},
    [VERSION] = {"--version", NULL, "version", false},
};

static const struct cli_spec spec = {
    .commands = commands, .n_commands = 4, .flags = flags, .n_flags = N, .global = CLI_FLAG(DB),
    .help_flag = HELP, .version_flag = VERSION, .synopsis = "[--db PATH]", .help_head = "", .help_foot = "",
};

/* Parses a command line given as words separated by single spaces. */
static int parse(const char *line, struct cli_args *a)
{
    static char buf[512];
    char *argv[32] = {"tierctl"};
    int argc = 1;
    snprintf(buf, sizeof(buf), "%s", line);
    for (char *w = strtok(buf, " "); w && argc < 32; w = strtok(NULL, " "))
        argv[argc++] = w;
    return cli_parse(&spec, argc, argv, a);
}

static void test_flags_stand_anywhere(void **state)
{
    (void)state;
    struct cli_args a;
    assert_int_equal(parse("--json plan --db x add --rate 1/s gold --rate 2/min", &a), CLI_RUN);
    assert_string_equal(a.cmd->words, "plan add");
    assert_int_equal(a.npos, 1);
    assert_string_equal(a.pos[0], "gold");
    assert_int_equal(a.count[RATE], 2);
    assert_string_equal(a.values[RATE][0], "1/s");
    assert_string_equal(a.values[RATE][1], "2/min");
    assert_string_equal(a.flag[DB], "x");
    assert_string_equal(a.flag[JSON], "");
    /* the longest command the words begin with; a value is taken whatever it looks like */
    assert_int_equal(parse("user limit add --rate --json bob", &a), CLI_RUN);
    assert_string_equal(a.cmd->words, "user limit add");
    assert_string_equal(a.flag[RATE], "--json");
    assert_string_equal(a.pos[0], "bob");
    /* "--" ends the flags */
    assert_int_equal(parse("plan add -- --rate", &a), CLI_RUN);
    assert_string_equal(a.pos[0], "--rate");
    assert_null(a.flag[RATE]);
}

static void test_repeats_only_where_the_table_allows(void **state)
{
    (void)state;
    struct cli_args a;
    assert_int_equal(parse("plan list --json --json", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("user limit add bob --rate 1/s --rate 2/s", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("plan add g --rate 1/s --rate 2/s --rate 3/s --rate 4/s --rate 5/s", &a),
                     CLI_EXIT_USAGE);
    /* a global flag: the last one wins */
    assert_int_equal(parse("--db a plan list --db b", &a), CLI_RUN);
    assert_string_equal(a.flag[DB], "b");
    assert_int_equal(parse("plan list --rate 1/s", &a), CLI_EXIT_USAGE);   /* not its flag */
    assert_int_equal(parse("plan list --bogus", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("plan add", &a), CLI_EXIT_USAGE);               /* missing NAME */
    assert_int_equal(parse("plan add a b", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("plan add a --rate", &a), CLI_EXIT_USAGE);      /* no value */
}

static void test_switches_take_booleans(void **state)
{
    (void)state;
    struct cli_args a;
    assert_int_equal(parse("plan list --json=no", &a), CLI_RUN);
    assert_null(a.flag[JSON]);
    assert_int_equal(parse("plan list --json=Yes", &a), CLI_RUN);
    assert_string_equal(a.flag[JSON], "");
    assert_int_equal(parse("plan list --json=maybe", &a), CLI_EXIT_USAGE);
    bool v;
    const char *yes[] = {"yes", "on", "true", "1", "TRUE"}, *no[] = {"no", "off", "false", "0", "Off"};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(cli_parse_bool(yes[i], &v), 0);
        assert_true(v);
        assert_int_equal(cli_parse_bool(no[i], &v), 0);
        assert_false(v);
    }
    assert_int_equal(cli_parse_bool("", &v), -EINVAL);
    assert_int_equal(cli_parse_bool("y", &v), -EINVAL);
    int64_t n;
    assert_int_equal(cli_parse_int("7", 0, 9, &n), 0);
    assert_int_equal(n, 7);
    assert_int_equal(cli_parse_int("10", 0, 9, &n), -EINVAL);
    assert_int_equal(cli_parse_int("-1", -5, 9, &n), -EINVAL);   /* digits only */
    assert_int_equal(cli_parse_int("1x", 0, 9, &n), -EINVAL);
}

static void test_help_for_the_program_a_group_and_a_command(void **state)
{
    (void)state;
    struct cli_args a;
    const char *helped[] = {"--help", "help", "plan --help", "user limit -h", "user --help", "help plan add",
                            "plan add --rate 1/s --help", "--help plan list --bogus"};
    for (size_t i = 0; i < sizeof(helped) / sizeof(helped[0]); i++)
        assert_int_equal(parse(helped[i], &a), CLI_HELPED);
    assert_int_equal(parse("plan frob --help", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("frob --help", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("plan --help=no", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("plan list --version", &a), CLI_VERSION);
    assert_int_equal(parse("plan", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("user limit", &a), CLI_EXIT_USAGE);
    assert_int_equal(parse("", &a), CLI_EXIT_USAGE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flags_stand_anywhere),
        cmocka_unit_test(test_repeats_only_where_the_table_allows),
        cmocka_unit_test(test_switches_take_booleans),
        cmocka_unit_test(test_help_for_the_program_a_group_and_a_command),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
