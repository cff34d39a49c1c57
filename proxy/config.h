/* tierproxy's configuration: defaults, then the INI file (libinih), then
 * TIERPROXY_<SECTION>_<KEY> environment variables, then command-line flags, each overriding
 * the one before (as a flag given by hand overrides what a unit's environment sets).
 *
 * Each value keeps where it came from (config_origin: "FILE:LINE: [section] key", "--flag",
 * "TIERPROXY_...") and the text it was given, for the messages and for [log] level = debug,
 * which lists every setting and its source at start and at each reload. Every problem is
 * reported; the load fails when anything was, and the first is also kept as one line for
 * callers that want one (the unit tests, the fuzzer). A file that sets nothing (no key =
 * value line: empty, blank, only comments and [section] lines, as a file caught truncated
 * is) is refused on reload, which keeps the running configuration; a start with such a file
 * runs on the defaults and the flags.
 */
#pragma once
#include "proxy/config_types.h"

/* Builds the configuration from defaults, the file named by -c (if any), envp and argv,
 * and tells problem (when not NULL) of every bad value found, in the order found: the
 * file's, the environment's, the flags'. err (may be NULL) receives the first as one line,
 * "where: why". Returns 0 with *cfg filled and *paction set; -EINVAL when a problem was
 * found; 2 for a usage error (an unknown flag: only that one, with the usage line);
 * -ENOMEM. On failure *cfg is left empty. */
int config_load_reported(int argc, char **argv, char **envp, struct proxy_config *cfg, enum config_action *paction,
                         config_problem_fn *problem, void *ctx, char *err, size_t errlen);
/* The same, with only the first problem, in err. */
int config_load(int argc, char **argv, char **envp, struct proxy_config *cfg,
                enum config_action *paction, char *err, size_t errlen);

/* Re-reads cfg->config_path with the same argv and envp into *fresh (for SIGHUP).
 * Same returns as config_load_reported, config_load. */
int config_reload_reported(const struct proxy_config *current, int argc, char **argv, char **envp,
                           struct proxy_config *fresh, config_problem_fn *problem, void *ctx, char *err,
                           size_t errlen);
int config_reload(const struct proxy_config *current, int argc, char **argv, char **envp,
                  struct proxy_config *fresh, char *err, size_t errlen);

/* For a reload: the settings a running process cannot change (listen addresses, workers,
 * store, catalog path, ...) keep their running values in fresh. The two swap them, so
 * each struct still frees what it holds. Writes the names of those that differed into
 * changed ("" when none). */
void config_keep_restart_only(struct proxy_config *running, struct proxy_config *fresh, char *changed,
                              size_t changed_len);

/* Names where the value of [section] key came from, for an error found after loading
 * (a plan missing from the catalog, a file that cannot be opened):
 * "FILE:LINE: [section] key", "--flag" (the flag as typed), "TIERPROXY_SECTION_KEY", or
 * "[section] key (default)". Writes into buf and returns it. */
const char *config_origin(const struct proxy_config *cfg, const char *section, const char *key, char *buf,
                          size_t buflen);

/* Calls fn for each setting: its name ("[proxy] listen"), the text it was given (a URL's
 * password as ***; the default's when nothing set it) and where that came from
 * ("FILE:LINE", "--flag", "TIERPROXY_SECTION_KEY" or "the default"). */
typedef void config_setting_fn(void *ctx, const char *name, const char *value, const char *source);
void config_settings(const struct proxy_config *cfg, config_setting_fn *fn, void *ctx);

/* url quoted for a message, at most 80 characters, with the password of each URL in it
 * (user:password@, or a lone password@) as ***. Returns buf (88 bytes are enough). */
const char *config_quote_url(const char *url, char *buf, size_t buflen);

/* Frees everything config_load allocated and zeroes *cfg. */
void config_free(struct proxy_config *cfg);

/* The usage text for --help. */
const char *config_usage(void);
