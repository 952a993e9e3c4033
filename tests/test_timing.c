/*
 * test_timing.c - timing mode counts exactly the calls made, per operation
 * and size class, and accounts the kernel's memory calls; switched on, it
 * stays on while another thread changes an option at the same time.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <malloc.h>
#include "tally.h"
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

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
        char *p = malloc(264 << 20);  /* over the large cache limit (256m): mmap + munmap */
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

/* Switching a mode while another thread changes mmap_threshold: both
 * recompute the fast paths' limits, and whatever the interleaving, the
 * mode switched on last must be in effect once both threads are done
 * (an update that read the options before the switch must not store its
 * stale limits after it). */
static atomic_int racing;

static void *move_threshold(void *arg)
{
    (void)arg;
    atomic_store(&racing, 2);                   /* running */
    for (int i = 0; atomic_load(&racing); i++)
        mallopt(M_MMAP_THRESHOLD, (i & 1) ? 256 * 1024 : 512 * 1024);
    return NULL;
}

Test(timing, a_mode_switched_on_stays_on_through_a_concurrent_mallopt, .timeout = 120)
{
    for (int round = 0; round < 100; round++) {
        atomic_store(&racing, 1);
        pthread_t t;
        pthread_create(&t, NULL, move_threshold, NULL);
        while (atomic_load(&racing) != 2)
            ;
        for (int i = 0; i < 200; i++) {
            tally_option_set("timing", "1");
            tally_option_set("timing", "0");
        }
        tally_option_set("timing", "1");
        atomic_store(&racing, 0);
        pthread_join(t, NULL);
        tally_timing_reset();
        free(malloc(100));
        struct tally_timing_op m;
        tally_timing_get_class(TALLY_OP_MALLOC, 100, &m);
        tally_option_set("timing", "0");
        cr_assert_eq(m.count, 1, "round %d: timing is on, but malloc went untimed", round);
    }
    cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 512 * 1024), 1);
}

/* fork() while another thread calibrates the clock, which it does holding
 * a lock for 2 ms when timing is first switched on: the child must not
 * inherit that lock held (it hung on its first option change). Each round
 * runs in a process of its own, so that every round calibrates anew. */
static void *switch_timing_on(void *arg)
{
    (void)arg;
    tally_option_set("timing", "1");
    return NULL;
}

static int fork_during_calibration(void)
{
    pthread_t t;
    pthread_create(&t, NULL, switch_timing_on, NULL);
    usleep(500);                        /* inside the 2 ms calibration */
    pid_t child = fork();
    if (child == 0) {
        alarm(5);
        tally_option_set("timing", "1");
        free(malloc(100));
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    pthread_join(t, NULL);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

Test(timing, a_fork_during_calibration_leaves_the_child_free_to_switch, .timeout = 120)
{
    for (int round = 0; round < 10; round++) {
        pid_t p = fork();
        if (p == 0)
            _exit(fork_during_calibration() ? 0 : 1);
        int status;
        waitpid(p, &status, 0);
        cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "round %d: the child of a fork during calibration hung", round);
    }
}

/* A timed free reads the block's size before freeing it; that read must
 * not report the misuse itself, as a malloc_usable_size() the program
 * never called: free reports it, as with timing off. */
static void double_free_timed(void *arg)
{
    (void)arg;
    tally_option_set("debug", "1");
    tally_option_set("timing", "1");
    void *volatile p = malloc(40);
    void *volatile q = malloc(40);
    free(p);
    free(q);
    free(p);
}

static char not_from_malloc[64] __attribute__((aligned(16)));

static void foreign_free_timed(void *arg)
{
    (void)arg;
    tally_option_set("timing", "1");
    char *volatile p = not_from_malloc;
    free(p + 16);
}

Test(timing, a_timed_misuse_is_reported_by_free)
{
    struct child_result r = run_in_child(double_free_timed, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "%s", r.err);
    cr_assert(strstr(r.err, "tally: free(): double free"), "%s", r.err);
    cr_assert(!strstr(r.err, "malloc_usable_size"), "%s", r.err);
    r = run_in_child(foreign_free_timed, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "%s", r.err);
    cr_assert(strstr(r.err, "tally: free(): invalid pointer"), "%s", r.err);
}

/* The exit report streams out line by line: a row, its page faults and the
 * first class row of the next operation must never overrun the report's
 * buffer. Classes 1..k of malloc, then calloc and free, so the operations'
 * rows start at many offsets into the buffer. */
static void timed_classes_then_exit(void *arg)
{
    int k = *(int *)arg;
    tally_option_set("timing", "1");
    for (int c = 1; c <= k; c++) {
        void *volatile p = malloc((size_t)c * 16);
        free(p);
    }
    void *volatile q = calloc(1, 16);
    free(q);
    exit(0);                     /* the report is printed at exit */
}

/* A whole row: "  NAME CLASS: count C, mean M ns, ..., max X ns". */
static bool is_whole_row(const char *l, size_t len)
{
    unsigned long c, m, p50, p99, max;
    int n = -1;
    sscanf(l, "%*[^:]: count %lu, mean %lu ns, p50 <= %lu ns, p99 <= %lu ns, max %lu ns%n", &c,
           &m, &p50, &p99, &max, &n);
    return n == (int)len;
}

Test(timing, exit_report_lines_are_whole)
{
    for (int k = 1; k <= 8; k++) {
        struct child_result r = run_in_child(timed_classes_then_exit, &k);
        cr_assert(strstr(r.err, "tally: timing report"), "%s", r.err);
        int rows = 0;
        for (char *l = r.err; *l;) {
            char *end = strchr(l, '\n');
            cr_assert(end, "a line without its newline: %s", l);
            *end = '\0';
            if (strstr(l, "count ")) {
                cr_assert(is_whole_row(l, (size_t)(end - l)), "k = %d, a row cut short: %s", k, l);
                rows++;
            }
            l = end + 1;
        }
        cr_assert_geq(rows, 2 * k + 4, "malloc, calloc and free, each with its classes");
    }
}

/* Thread generations under timing: each thread's sample table (about 150
 * KiB mapped, 32 KiB of it touched by a few calls) was mapped at its first
 * timed call and kept for ever, so a program that runs short threads grew
 * by that much per thread (4,000 threads: 130 MB of RSS). An exited
 * thread's table is taken over by the next new one, counts and all, so
 * the totals stay exact and the memory stays flat. A free from a key
 * destructor that runs after timing's own (the thread's late calls) is
 * still counted. */
static pthread_key_t late_key;

static void late_free(void *p) { free(p); }

static void *timed_thread(void *arg)
{
    void *volatile p = malloc(12345);
    free(p);
    if (arg)
        pthread_setspecific(late_key, malloc(12345));
    return NULL;
}

Test(timing, short_threads_do_not_grow_the_timing_tables, .timeout = 60)
{
    cr_assert_eq(tally_option_set("timing", "1"), 0);
    run_in_thread(timed_thread, NULL);      /* the first table, then measure */
    /* Made after timing's key, so its destructor runs after timing's. */
    cr_assert_eq(pthread_key_create(&late_key, late_free), 0);
    tally_timing_reset();
    struct tally_stats before = { .size = sizeof before }, after = { .size = sizeof after };
    tally_stats_get(&before);
    enum { THREADS = 1000 };
    for (int i = 0; i < THREADS; i++)
        run_in_thread(timed_thread, &late_key);
    tally_stats_get(&after);
    struct tally_timing_op m, f;
    tally_timing_get_class(TALLY_OP_MALLOC, 12345, &m);
    tally_timing_get_class(TALLY_OP_FREE, 12345, &f);
    tally_option_set("timing", "0");
    pthread_key_delete(late_key);
    cr_assert_eq(m.count, 2 * THREADS);
    cr_assert_eq(f.count, 2 * THREADS, "the destructor's free is counted too");
    cr_assert_lt(after.mapped_bytes, before.mapped_bytes + (16u << 20),
                 "mapped %llu -> %llu bytes over %d threads",
                 (unsigned long long)before.mapped_bytes,
                 (unsigned long long)after.mapped_bytes, THREADS);
}

/* A request above a lowered mmap_threshold is served by a mapping of its
 * own, and its latency (an mmap) belongs in the "large" row. It was filed
 * under the medium class its size would have had at the default threshold
 * (mmap_threshold=64k: malloc(100000) showed as "class 106496", large 0). */
Test(timing, a_request_above_a_lowered_threshold_is_filed_as_large)
{
    cr_assert_eq(tally_option_set("mmap_threshold", "64k"), 0);
    cr_assert_eq(tally_option_set("timing", "1"), 0);
    tally_timing_reset();
    struct tally_stats before = { .size = sizeof before }, after = { .size = sizeof after };
    tally_stats_get(&before);
    void *volatile p = malloc(100000);
    tally_stats_get(&after);
    free(p);
    struct tally_timing_op medium, large;
    tally_timing_get_class(TALLY_OP_MALLOC, 100000, &medium);
    tally_timing_get_class(TALLY_OP_MALLOC, (size_t)1 << 30, &large);
    cr_assert_eq(tally_option_set("timing", "0"), 0);
    cr_assert_eq(tally_option_set("mmap_threshold", "512k"), 0);
    cr_assert_eq(after.large_count, before.large_count + 1, "served by a mapping of its own");
    cr_assert_eq(large.count, 1, "filed as large");
    cr_assert_eq(medium.count, 1, "the query for its size reads the same row");
}
