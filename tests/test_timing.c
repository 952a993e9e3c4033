/*
 * test_timing.c - timing mode counts exactly the calls made, per operation
 * and size class, and accounts the kernel's memory calls.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <malloc.h>
#include "tally.h"

Test(timing, histograms_count_exactly_the_calls_made)
{
    cr_assert_eq(tally_option_set("timing", "1"), 0);
    tally_timing_reset();
    void *v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = malloc(100);
    for (int i = 0; i < 500; i++)
        v[i] = realloc(v[i], 100);
    for (int i = 0; i < 1000; i++)
        free(v[i]);
    void *c = calloc(3, 1000);
    free(c);
    struct tally_timing_op m, f, r, c3000;
    tally_timing_get_class(TALLY_OP_MALLOC, 100, &m);
    tally_timing_get_class(TALLY_OP_FREE, 100, &f);
    tally_timing_get_class(TALLY_OP_REALLOC, 100, &r);
    tally_timing_get_class(TALLY_OP_CALLOC, 3000, &c3000);
    cr_assert_eq(tally_option_set("timing", "0"), 0);
    cr_assert_eq(m.count, 1000);
    cr_assert_eq(f.count, 1000);
    cr_assert_eq(r.count, 500);
    cr_assert_eq(c3000.count, 1);
    uint64_t in_buckets = 0;
    for (int b = 0; b < TALLY_TIMING_BUCKETS; b++)
        in_buckets += m.buckets[b];
    cr_assert_eq(in_buckets, 1000, "every sample lands in one bucket");
    cr_assert_geq(m.max_ns * m.count, m.total_ns);
}

Test(timing, totals_faults_and_syscalls)
{
    tally_option_set("timing", "1");
    tally_timing_reset();
    struct tally_timing before = { .size = sizeof before }, after = { .size = sizeof after };
    tally_timing_get(&before);
    for (int i = 0; i < 20; i++) {
        char *p = malloc(80 << 20);   /* too big for the large cache: mmap + munmap */
        p[0] = 1;
        free(p);
    }
    tally_timing_get(&after);
    tally_option_set("timing", "0");
    cr_assert_eq(after.version, TALLY_TIMING_VERSION);
    cr_assert_eq(after.ops[TALLY_OP_MALLOC].count, 20);
    cr_assert_eq(after.ops[TALLY_OP_FREE].count, 20);
    cr_assert_geq(after.syscalls[0] - before.syscalls[0], 20, "mmap calls");
    cr_assert_geq(after.syscalls[1] - before.syscalls[1], 20, "munmap calls");
    cr_assert_gt(after.syscall_ns[0], before.syscall_ns[0], "mmap time accounted");
    cr_assert_lt(after.clock_overhead_ns, 1000);
}

Test(timing, report_at_exit)
{
    char out[8192], cmd[1024];
    snprintf(cmd, sizeof cmd, "TALLY_OPTIONS=timing=1 LD_PRELOAD=%s ./prog_plain 2>&1",
             tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert(strstr(out, "tally: timing report (clock overhead "), "%s", out);
    cr_assert(strstr(out, "malloc all sizes: count "), "%s", out);
    cr_assert(strstr(out, "page faults: "), "%s", out);
}
