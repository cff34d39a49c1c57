/* Header field names compared as CGI, WSGI and Rack stacks see them: they fold "-" and "_"
 * together (HTTP_X_TIER_USER), so "X_Tier_User" reaches an application as X-Tier-User
 * (CVE-2015-0219). Pure, header-only.
 *
 * With underscores_in_headers = forward, names with "_" are forwarded, but any "_" spelling
 * of X-Tier-*, the key header, Host or X-Forwarded-* is still dropped, since the upstream's
 * stack would read it as that field.
 */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static inline unsigned char field_name_fold(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return (unsigned char)(c - 'A' + 'a');
    return c == '_' ? '-' : c;
}

static inline bool field_name_has_underscore(const char *name, size_t len)
{
    return memchr(name, '_', len) != NULL;
}

/* Whether name[0, len) starts with prefix, ignoring case and with "_" as "-". */
static inline bool field_name_has_prefix_folded(const char *name, size_t len, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n > len)
        return false;
    for (size_t i = 0; i < n; i++)
        if (field_name_fold((unsigned char)name[i]) != field_name_fold((unsigned char)prefix[i]))
            return false;
    return true;
}

/* Whether name[0, len) is other, ignoring case and with "_" as "-". */
static inline bool field_name_equal_folded(const char *name, size_t len, const char *other)
{
    return strlen(other) == len && field_name_has_prefix_folded(name, len, other);
}
