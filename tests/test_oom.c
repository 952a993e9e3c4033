/*
 * test_oom.c - running out of address space (RLIMIT_AS) gives NULL and
 * ENOMEM, never a crash, and the heap works again once memory is freed.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <sys/resource.h>

static long vm_kib(void)
{
    char buf[128] = { 0 };
    int fd = open("/proc/self/statm", O_RDONLY);
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    long size = 0;
    if (n > 0)
        sscanf(buf, "%ld", &size);
    return size * (sysconf(_SC_PAGESIZE) / 1024);
}

/* Runs fn(arg) in a child that exits with the number of the step that
 * failed, 0 when all passed. */
static void assert_steps_pass(void (*fn)(void *), void *arg)
{
    struct child_result r = run_in_child(fn, arg);
    cr_assert(WIFEXITED(r.status), "child crashed: status %d, stderr %s", r.status, r.err);
    cr_assert_eq(WEXITSTATUS(r.status), 0, "child failed step %d", WEXITSTATUS(r.status));
}

static void exhaust(void *arg)
{
    size_t block = *(size_t *)arg;
    struct rlimit rl = { .rlim_cur = (rlim_t)(vm_kib() + 256 * 1024) * 1024,
                         .rlim_max = RLIM_INFINITY };
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        _exit(10);
    static void *v[1 << 20];
    size_t n = 0;
    errno = 0;
    while (n < (1 << 20) && (v[n] = malloc(block)) != NULL)
        memset(v[n++], 7, 64);
    if (n == (1 << 20))
        _exit(11);                      /* the limit did not bite */
    if (errno != ENOMEM)
        _exit(12);
    if (calloc(1, block) != NULL || errno != ENOMEM)
        _exit(13);
    /* Free half, and the heap must serve again. */
    for (size_t i = 0; i < n; i += 2)
        free(v[i]);
    void *again = malloc(block);
    if (!again)
        _exit(14);
    memset(again, 1, block);
    for (size_t i = 1; i < n; i += 2)
        if (((unsigned char *)v[i])[63] != 7)
            _exit(15);
    _exit(0);
}

static void check_exhaust(size_t block)
{
    assert_steps_pass(exhaust, &block);
}

Test(oom, small_blocks_under_rlimit_as, .timeout = 60) { check_exhaust(1000); }
Test(oom, medium_blocks_under_rlimit_as, .timeout = 60) { check_exhaust(30000); }
Test(oom, large_blocks_under_rlimit_as, .timeout = 60) { check_exhaust(3 << 20); }

/* The large cache keeps freed blocks mapped, and so charged to RLIMIT_AS
 * and the commit limit. When the OS refuses a request they are the
 * program's freed memory, not tally's to keep: with 120 MiB of them
 * cached under a 200 MiB margin, 1000 B blocks stopped at 89 MiB (glibc:
 * 198), and here an 8 MiB-aligned block (never served from the cache), a
 * realloc to 64 MiB and 100 MB of small blocks failed. */
static void cache_96_mib(void)
{
    void *volatile v[3];
    free(v[0] = malloc(32 << 20));          /* a large request after a large free */
    for (int i = 0; i < 3; i++)             /* arms the cache */
        v[i] = malloc(32 << 20);
    for (int i = 0; i < 3; i++)
        free(v[i]);
}

/* 32 MiB live, 96 cached and 16 of segments leave 16 MiB of the margin. */
static void cache_gives_way(void *arg)
{
    (void)arg;
    struct rlimit rl = { .rlim_cur = (rlim_t)(vm_kib() + 160 * 1024) * 1024,
                         .rlim_max = RLIM_INFINITY };
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        _exit(10);
    void *live = malloc(32 << 20), *p = NULL;
    cache_96_mib();
    if (posix_memalign(&p, 8 << 20, 40 << 20) != 0)   /* never from the cache */
        _exit(11);
    free(p);
    cache_96_mib();
    if (!(live = realloc(live, 64 << 20)))
        _exit(12);
    free(live);
    cache_96_mib();
    static void *b[100000];
    for (size_t n = 0; n < 100000; n++)     /* 100 MB of small blocks */
        if (!(b[n] = malloc(1000)))
            _exit(13);
    _exit(0);
}

Test(oom, cached_large_blocks_give_way_to_a_refused_request, .timeout = 60)
{
    assert_steps_pass(cache_gives_way, NULL);
}

/* glibc never fails a shrinking realloc (a block that holds the new size
 * stays put when no smaller one can be had), and code relies on it. */
static void shrink_without_memory(void *arg)
{
    (void)arg;
    char *large = malloc(2 << 20), *medium = malloc(200 << 10);
    memset(large, 7, 2 << 20);
    memset(medium, 7, 200 << 10);
    struct rlimit rl = { .rlim_cur = (rlim_t)(vm_kib() + 64 * 1024) * 1024,
                         .rlim_max = RLIM_INFINITY };
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        _exit(10);
    static void *v[1 << 20];
    size_t n = 0, fill[] = { 100 << 10, 1000, 64 };
    for (int k = 0; k < 3; k++)
        while (n < (1 << 20) && (v[n] = malloc(fill[k])) != NULL)
            n++;
    if (n == (1 << 20))
        _exit(11);                          /* the limit did not bite */
    char *a = realloc(large, 100 << 10), *b = realloc(medium, 1000);
    if (!a || !b)
        _exit(12);
    if (a[(100 << 10) - 1] != 7 || b[999] != 7)
        _exit(13);
    _exit(0);
}

Test(oom, a_shrinking_realloc_never_fails, .timeout = 60)
{
    assert_steps_pass(shrink_without_memory, NULL);
}
