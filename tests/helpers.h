/*
 * helpers.h - shared by the Criterion tests: run a function in a child and
 * capture how it ended and what it wrote to stderr; read the RSS.
 */
#ifndef TALLY_TEST_HELPERS_H
#define TALLY_TEST_HELPERS_H

#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct child_result {
    int status;          /* as from waitpid */
    char err[4096];      /* what the child wrote to stderr */
};

/* Runs fn(arg) in a forked child; the child exits 0 if fn returns. */
static inline struct child_result run_in_child(void (*fn)(void *), void *arg)
{
    struct child_result r = { 0 };
    int fds[2];
    if (pipe(fds) != 0)
        abort();
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    ssize_t n;
    while ((n = read(fds[0], r.err + len, sizeof r.err - 1 - len)) > 0)
        len += (size_t)n;
    r.err[len] = '\0';
    close(fds[0]);
    waitpid(pid, &r.status, 0);
    return r;
}

/* Runs fn(arg) on a thread of its own (a heap of its own) and waits. */
static inline void run_in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    if (pthread_create(&t, NULL, fn, arg) != 0)
        abort();
    pthread_join(t, NULL);
}

static inline int child_signal(const struct child_result *r)
{
    return WIFSIGNALED(r->status) ? WTERMSIG(r->status) : 0;
}

/* Resident set size of this process in KiB. */
static inline long rss_kib(void)
{
    char buf[128] = { 0 };
    int fd = open("/proc/self/statm", O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    long size, resident;
    if (sscanf(buf, "%ld %ld", &size, &resident) != 2)
        return -1;
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* OS pages of [p, p + n) in RAM now, the partial ones at both ends
 * included (mincore; up to 256 MiB); (size_t)-1 when it fails. */
static inline size_t pages_in_ram(const void *p, size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p / pg * pg, hi = ((uintptr_t)p + n + pg - 1) / pg * pg;
    static unsigned char vec[1 << 16];
    if ((hi - lo) / pg > sizeof vec || mincore((void *)lo, hi - lo, vec) != 0)
        return (size_t)-1;
    size_t r = 0;
    for (size_t i = 0; i < (hi - lo) / pg; i++)
        r += vec[i] & 1;
    return r;
}

static inline long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
    nanosleep(&ts, NULL);
}

/* A peak of memory to give back: PEAK_BYTES of `size`-byte blocks, each
 * written, in an array mapped outside the allocator (so freeing the
 * blocks leaves nothing of tally's in use). *count gets the number. */
#define PEAK_BYTES (192u << 20)
static inline void **build_peak(size_t size, size_t *count)
{
    size_t n = PEAK_BYTES / size;
    void **v = mmap(NULL, n * sizeof *v, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED)
        abort();
    for (size_t i = 0; i < n; i++) {
        v[i] = malloc(size);
        memset(v[i], 0x33, size);
    }
    *count = n;
    return v;
}

static inline void free_all(void **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
}

/* Absolute path of the library under test (the Makefile exports it). */
static inline const char *tally_lib(void)
{
    const char *lib = getenv("TALLY_LIB");
    return lib ? lib : "../libtally.so";
}

/* Runs a command line through /bin/sh, capturing stdout+stderr. */
static inline int run_cmd(const char *cmd, char *out, size_t outlen)
{
    FILE *f = popen(cmd, "r");
    if (!f)
        return -1;
    size_t len = fread(out, 1, outlen - 1, f);
    out[len] = '\0';
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#endif
