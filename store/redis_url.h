/* Redis connection URLs: redis://[[user]:password@]host[:port][/db] and
 * unix://[[user]:password@]/path[?db=N]. Private to store/ (and its unit tests). */
#pragma once
#include <stdbool.h>
#include <stddef.h>

struct redis_url {
    bool is_unix;
    char host[256];          /* TCP: name or address, without IPv6 brackets */
    int port;                /* TCP: default 6379 */
    char path[108];          /* unix: socket path */
    char username[128];      /* empty: AUTH with the password alone */
    char password[256];
    bool has_password;       /* send AUTH after connecting */
    int db;                  /* SELECT after connecting when not 0 */
};

/* Parses text into *url (percent-escapes are decoded in user, password and path).
 * Returns 0, or -EINVAL with a reason in err that never contains the password. */
int redis_url_parse(const char *text, struct redis_url *url, char *err, size_t errlen);
