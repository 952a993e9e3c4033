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
    struct child_result r = run_in_child(exhaust, &block);
    cr_assert(WIFEXITED(r.status), "child crashed: status %d, stderr %s", r.status, r.err);
    cr_assert_eq(WEXITSTATUS(r.status), 0, "child failed step %d", WEXITSTATUS(r.status));
}

Test(oom, small_blocks_under_rlimit_as, .timeout = 60) { check_exhaust(1000); }
Test(oom, medium_blocks_under_rlimit_as, .timeout = 60) { check_exhaust(100000); }
Test(oom, large_blocks_under_rlimit_as, .timeout = 60) { check_exhaust(3 << 20); }
