/* The stderr log. See log.h. */
#include "proxy/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

/* Longest msg a line carries; longer text is cut (configuration values are quoted short). */
#define LOG_MSG_MAX 2048

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static atomic_int threshold = LOG_LEVEL_INFO;

int log_level_parse(const char *word, enum log_level *plevel)
{
    for (int i = LOG_LEVEL_ERROR; i <= LOG_LEVEL_DEBUG; i++) {
        if (strcasecmp(word, level_names[i]) == 0) {
            *plevel = (enum log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *log_level_name(enum log_level level)
{
    return level >= LOG_LEVEL_ERROR && level <= LOG_LEVEL_DEBUG ? level_names[level] : "error";
}

void log_set_level(enum log_level level)
{
    atomic_store(&threshold, (int)level);
}

bool log_enabled(enum log_level level)
{
    return (int)level <= atomic_load_explicit(&threshold, memory_order_relaxed);
}

void log_format_time(int64_t unix_ms, char *buf, size_t buflen)
{
    time_t secs = (time_t)(unix_ms / 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    size_t n = strftime(buf, buflen, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, buflen - n, ".%03dZ", (int)(unix_ms % 1000));
}

void log_write_json(int fd, const json_t *obj)
{
    char *line = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER);
    if (line == NULL)
        return;
    size_t len = strlen(line);
    line[len] = '\n'; /* json_dumps' NUL is replaced; the length is kept */
    size_t off = 0;
    while (off < len + 1) {
        ssize_t n = write(fd, line + off, len + 1 - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    free(line);
}

/* A msg that is not valid UTF-8 (a path, a value from the file) keeps its length with
 * each byte past ASCII as '?', rather than being dropped. */
static json_t *msg_json(const char *msg)
{
    json_t *s = json_string(msg);
    if (s != NULL)
        return s;
    char *copy = strdup(msg);
    if (copy == NULL)
        return NULL;
    for (char *p = copy; *p != '\0'; p++)
        if ((unsigned char)*p >= 0x80)
            *p = '?';
    s = json_string(copy);
    free(copy);
    return s;
}

json_t *log_line_start(const char *level, const char *msg)
{
    enum log_level lv = LOG_LEVEL_ERROR;
    log_level_parse(level, &lv);
    if (!log_enabled(lv))
        return NULL;
    char when[40];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    log_format_time((int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000, when, sizeof(when));
    json_t *o = json_object();
    if (o == NULL)
        return NULL;
    json_object_set_new(o, "time", json_string(when));
    json_object_set_new(o, "level", json_string(log_level_name(lv)));
    json_object_set_new(o, "msg", msg_json(msg));
    return o;
}

void log_line_write(json_t *line)
{
    if (line == NULL)
        return;
    log_write_json(STDERR_FILENO, line);
    json_decref(line);
}

static void say(enum log_level level, const char *where, const char *fmt, va_list ap)
{
    if (!log_enabled(level))
        return;
    char msg[LOG_MSG_MAX];
    int n = 0;
    if (where[0] != '\0')
        n = snprintf(msg, sizeof(msg), "%s: ", where);
    if (n < 0 || (size_t)n >= sizeof(msg))
        n = 0;
    vsnprintf(msg + n, sizeof(msg) - (size_t)n, fmt, ap);
    json_t *line = log_line_start(log_level_name(level), msg);
    if (line != NULL && where[0] != '\0')
        json_object_set_new(line, "where", msg_json(where));
    log_line_write(line);
}

void log_say(enum log_level level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(level, "", fmt, ap);
    va_end(ap);
}

void log_where(enum log_level level, const char *where, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    say(level, where != NULL ? where : "", fmt, ap);
    va_end(ap);
}
