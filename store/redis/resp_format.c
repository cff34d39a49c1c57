/* RESP framing without printf: see resp_format.h. */
#include "store/redis/resp_format.h"

#include <string.h>

#include "store/decimal.h"

size_t resp_write_int(char *buf, int64_t v)
{
    if (v >= 0)
        return decimal_digits(buf, (uint64_t)v);
    buf[0] = '-';
    return 1 + decimal_digits(buf + 1, (uint64_t)0 - (uint64_t)v);
}

/* A count or a length line: its marker ('*' or '$'), the number and CRLF. */
static size_t write_line(char *out, char marker, uint64_t v)
{
    out[0] = marker;
    size_t n = 1 + decimal_digits(out + 1, v);
    memcpy(out + n, "\r\n", 2);
    return n + 2;
}

/* A line's bytes at most: the marker, the longest number and CRLF. */
#define LINE_MAX_BYTES (1 + (DECIMAL_MAX - 1) + 2)

size_t resp_format_bound(int argc, size_t total_len)
{
    return LINE_MAX_BYTES + (size_t)argc * (LINE_MAX_BYTES + 2) + total_len + 1;
}

size_t resp_format(char *out, int argc, const char **argv, const size_t *lens)
{
    size_t o = write_line(out, '*', (uint64_t)argc);
    for (int i = 0; i < argc; i++) {
        o += write_line(out + o, '$', lens[i]);
        memcpy(out + o, argv[i], lens[i]);
        o += lens[i];
        memcpy(out + o, "\r\n", 2);
        o += 2;
    }
    out[o] = '\0';
    return o;
}
