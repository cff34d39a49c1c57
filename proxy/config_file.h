/* The INI file of tierproxy's configuration (libinih behind a line reader of our own, which
 * counts lines and screens each one): every key = value line is set through the directive
 * table, and every problem is reported with the file and line, not only the first.
 *
 * libinih is given the file line by line by a reader that counts lines and screens each one
 * (a line with no "=" or ":", a "[" with no "]", a line over 16 KiB, an unknown section
 * with no key), reports what inih would refuse and hands it a blank line instead, so the
 * rest is still read; the handler reports each unknown key, duplicate or bad value and goes
 * on.
 */
#pragma once
#include "proxy/config_table.h"

/* Reads path into cfg (its values and their origins), reporting every problem found.
 * Returns 0, or -ENOMEM (what was reported stays reported). */
int config_file_load(struct proxy_config *cfg, const char *path, struct config_report *report);
