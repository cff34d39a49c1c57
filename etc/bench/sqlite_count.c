/* LD_PRELOAD shim used by etc/bench.sh: counts the SQLite statements a process runs
 * (sqlite3_step and sqlite3_exec calls) into a shared 4 KiB file named by
 * $TP_BENCH_SQLITE_COUNTER (two little-endian uint64: steps, execs), so the benchmark
 * can read the count before and after a run without stopping the process.
 * Build: cc -O2 -shared -fPIC -o sqlite_count.so sqlite_count.c -ldl */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static uint64_t *counters;

__attribute__((constructor)) static void counter_init(void)
{
    const char *path = getenv("TP_BENCH_SQLITE_COUNTER");
    if (!path || !*path)
        return;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return;
    void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m != MAP_FAILED)
        counters = m;
}

int sqlite3_step(void *stmt);
int sqlite3_step(void *stmt)
{
    static int (*real)(void *);
    if (!real)
        real = (int (*)(void *))dlsym(RTLD_NEXT, "sqlite3_step");
    if (counters)
        __atomic_fetch_add(&counters[0], 1, __ATOMIC_RELAXED);
    return real(stmt);
}

int sqlite3_exec(void *db, const char *sql, void *cb, void *arg, char **err);
int sqlite3_exec(void *db, const char *sql, void *cb, void *arg, char **err)
{
    static int (*real)(void *, const char *, void *, void *, char **);
    if (!real)
        real = (int (*)(void *, const char *, void *, void *, char **))dlsym(RTLD_NEXT, "sqlite3_exec");
    if (counters)
        __atomic_fetch_add(&counters[1], 1, __ATOMIC_RELAXED);
    return real(db, sql, cb, arg, err);
}
