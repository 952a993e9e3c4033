/*
 * bench_util.h - the small helpers every workload program in bench/ shares.
 *
 * Owns: wall-clock time, resident-set and page-fault readings, the
 * "metric NAME VALUE" output convention the runner (bench/run.py) parses,
 * a fast seeded PRNG, byte-pattern fill/verify for self-checks, and the one
 * failure path (bu_fail) that turns an allocator bug into a non-zero exit.
 *
 * Why a header of static inline functions: each workload is one C file
 * built into its own program, and the helpers must not allocate (reading
 * /proc with stdio would call malloc and disturb the allocator under test),
 * so they use open/read into stack buffers.
 */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* must precede every system header: include me first */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define BU_PAGE 4096u

/* ---- time ---------------------------------------------------------- */

static inline uint64_t bu_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double bu_now_s(void)
{
    return (double)bu_now_ns() * 1e-9;
}

static inline void bu_sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* ---- failure and metrics -------------------------------------------- */

/* Report a failed self-check and exit non-zero: the runner shows FAIL. */
__attribute__((noreturn, format(printf, 1, 2)))
static inline void bu_fail(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    fflush(stdout);
    if (write(2, "CHECK FAILED: ", 14) < 0 || write(2, buf, (size_t)n) < 0)
        _exit(3);
    _exit(2);
}

/* malloc result check shared by all workloads. */
static inline void *bu_check(void *p, size_t size)
{
    if (p == NULL && size != 0)
        bu_fail("allocation of %zu bytes returned NULL", size);
    if (((uintptr_t)p & 15u) != 0 && size >= 16)
        bu_fail("pointer %p for %zu bytes is not 16-byte aligned", p, size);
    return p;
}

/* One machine-readable line; the runner keeps the median over runs. */
static inline void bu_metric(const char *name, double value)
{
    printf("metric %s %.6g\n", name, value);
}

/* ---- resident set and faults ---------------------------------------- */

/* Value in KiB of a "Key:   N kB" line of a /proc file, or -1. */
static inline long bu_proc_kib(const char *path, const char *key)
{
    char buf[8192];
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    size_t klen = strlen(key);
    for (char *line = buf; line && *line; ) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':')
            return strtol(line + klen + 1, NULL, 10);
        line = strchr(line, '\n');
        if (line)
            line++;
    }
    return -1;
}

static inline long bu_rss_kib(void)
{
    return bu_proc_kib("/proc/self/status", "VmRSS");
}

static inline long bu_hwm_kib(void)
{
    return bu_proc_kib("/proc/self/status", "VmHWM");
}

/* RSS minus pages marked MADV_FREE: memory the kernel may take back. */
static inline long bu_rss_minus_lazyfree_kib(void)
{
    long rss = bu_proc_kib("/proc/self/smaps_rollup", "Rss");
    long lazy = bu_proc_kib("/proc/self/smaps_rollup", "LazyFree");
    if (rss < 0 || lazy < 0)
        return -1;
    return rss - lazy;
}

static inline long bu_minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* ---- PRNG: splitmix64, cheap enough not to show in profiles ---------- */

typedef struct { uint64_t s; } bu_rng;

static inline uint64_t bu_next(bu_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n). The modulo bias is irrelevant for a benchmark. */
static inline uint64_t bu_below(bu_rng *r, uint64_t n)
{
    return bu_next(r) % n;
}

/* Log-uniform in [lo, hi]: as many small objects per octave as large. */
static inline size_t bu_log_size(bu_rng *r, size_t lo, size_t hi)
{
    unsigned lo_bits = 63u - (unsigned)__builtin_clzll(lo);
    unsigned hi_bits = 63u - (unsigned)__builtin_clzll(hi);
    /* A power-of-two hi closes the last octave; do not pile mass on it. */
    if (hi == (size_t)1 << hi_bits && hi_bits > lo_bits)
        hi_bits--;
    unsigned bits = lo_bits + (unsigned)bu_below(r, hi_bits - lo_bits + 1);
    size_t base = (size_t)1 << bits;
    size_t size = base + (size_t)bu_below(r, base);
    return size < lo ? lo : size > hi ? hi : size;
}

/* ---- threads ---------------------------------------------------------- */

/* Runs fn on n threads, each given its index (0..n-1) as its argument,
 * and waits for them all. */
static inline void bu_run_threads(long n, void *(*fn)(void *))
{
    pthread_t *tid = bu_check(calloc((size_t)n, sizeof *tid), (size_t)n * sizeof *tid);
    for (long i = 0; i < n; i++)
        if (pthread_create(&tid[i], NULL, fn, (void *)(uintptr_t)i))
            bu_fail("pthread_create failed");
    for (long i = 0; i < n; i++)
        pthread_join(tid[i], NULL);
    free(tid);
}

/* ---- self-check patterns -------------------------------------------- */

/*
 * Stamp a block: a tag in the first and last byte (and, with `full`, every
 * byte). A block freed twice, handed out twice or overwritten by a
 * neighbour then fails bu_verify.
 */
static inline void bu_fill(void *p, size_t size, uint8_t tag, int full)
{
    uint8_t *b = p;
    if (size == 0)
        return;
    if (full)
        memset(b, tag, size);
    b[0] = tag;
    if (size > 1)            /* a 1-byte block's last byte is its first */
        b[size - 1] = (uint8_t)~tag;
}

static inline void bu_verify(const void *p, size_t size, uint8_t tag,
                             const char *where)
{
    const uint8_t *b = p;
    const uint8_t inv = (uint8_t)~tag;
    if (size == 0)
        return;
    if (b[0] != tag || (size > 1 && b[size - 1] != inv))
        bu_fail("%s: block %p (%zu B) lost its pattern", where, p, size);
}

/* ---- argument parsing ------------------------------------------------ */

static inline long bu_arg_long(const char *s, const char *opt)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);   /* accepts 1e7 as well as 10000000 */
    if (errno || end == s || *end != '\0' || v < 0)
        bu_fail("bad value '%s' for %s", s, opt);
    return (long)v;
}

#endif /* BENCH_UTIL_H */
