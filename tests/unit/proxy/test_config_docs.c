/* The directive table is what the example file and the man page describe: every directive
 * of proxy/config_table.c has its line in etc/tierproxy.ini, in its section, and its entry
 * in man/tierproxy.8.scd, in its section, naming its default. (The example file cannot
 * name a key the table lacks: test_config.c loads it.) A directive added to the table
 * without its documentation fails here. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy/config_table.h"

static const char *example_ini, *man_page;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n > 0);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    assert_non_null(text);
    assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
    text[n] = '\0';
    fclose(f);
    return text;
}

/* The part of text from the line `opening` to the next line starting with `next` (or the
 * end), as a new string; NULL when there is no such line. */
static char *part(const char *text, const char *opening, const char *next)
{
    const char *start = strstr(text, opening);
    if (!start)
        return NULL;
    start += strlen(opening);
    const char *end = start;
    while ((end = strstr(end, next)) != NULL && end[-1] != '\n')
        end++;
    return strndup(start, end ? (size_t)(end - start) : strlen(start));
}

/* The INI line "key =" at the start of a line of section_text (which begins with the end
 * of the section's header line). */
static int ini_has(const char *section_text, const char *key)
{
    char want[128];
    snprintf(want, sizeof(want), "\n%s ", key);
    const char *at = strstr(section_text, want);
    if (!at)
        return 0;
    at += strlen(want);
    while (*at == ' ')
        at++;
    return *at == '=';
}

static void test_the_example_file_has_every_directive(void **state)
{
    (void)state;
    char *ini = slurp(example_ini);
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
        char opening[64];
        snprintf(opening, sizeof(opening), "\n[%s]", d->section);
        char *sec = part(ini, opening, "[");
        if (!sec || !ini_has(sec, d->key))
            fail_msg("%s has no line \"%s =\" in [%s]", example_ini, d->key, d->section);
        free(sec);
    }
    free(ini);
}

/* The man page's entry of a directive: from "*key*" at the start of a line to the next
 * entry or heading. */
static char *man_entry(const char *section_text, const char *key)
{
    char opening[96];
    snprintf(opening, sizeof(opening), "\n*%s*", key);
    const char *at = strstr(section_text, opening);
    if (!at) {
        snprintf(opening, sizeof(opening), ", *%s*", key);   /* "*a* = _MS_, *b* = _MS_" */
        at = strstr(section_text, opening);
    }
    if (!at)
        return NULL;
    const char *end = strstr(at + 1, "\n*");
    const char *heading = strstr(at + 1, "\n#");
    if (!end || (heading && heading < end))
        end = heading;
    return strndup(at, end ? (size_t)(end - at) : strlen(at));
}

static void test_the_man_page_has_every_directive_and_its_default(void **state)
{
    (void)state;
    char *man = slurp(man_page);
    for (size_t i = 0; i < config_n_directives; i++) {
        const struct directive *d = &config_directives[i];
        char opening[64];
        snprintf(opening, sizeof(opening), "## [%s]\n", d->section);
        char *sec = part(man, opening, "#");
        char *entry = sec ? man_entry(sec, d->key) : NULL;
        if (!entry)
            fail_msg("%s has no entry *%s* under \"## [%s]\"", man_page, d->key, d->section);
        if (d->def[0] && !strstr(entry, d->def) && !strstr(sec, d->def))
            fail_msg("%s: the entry of [%s] %s does not name its default \"%s\"", man_page, d->section, d->key,
                     d->def);
        free(entry);
        free(sec);
    }
    free(man);
}

int main(int argc, char **argv)
{
    example_ini = argc > 2 ? argv[1] : "etc/tierproxy.ini";
    man_page = argc > 2 ? argv[2] : "man/tierproxy.8.scd";
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_example_file_has_every_directive),
        cmocka_unit_test(test_the_man_page_has_every_directive_and_its_default),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
