/* The INI file of tierproxy's configuration (libinih behind a line reader of our own, which
 * counts lines and screens each one): every key = value line is set through the directive
 * table, and every problem is reported with the file and line, not only the first. */
#pragma once
#include "proxy/config_table.h"

/* Reads path into cfg (its values and their origins), reporting every problem found.
 * Returns 0, or -ENOMEM (what was reported stays reported). */
int config_file_load(struct proxy_config *cfg, const char *path, struct config_report *report);
