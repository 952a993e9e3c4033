/*
 * test_debug.c - every detection of debug mode, each in a child: the
 * report text and the abort (or, with abort=0, the continued run).
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <malloc.h>
#include <stdint.h>
#include <stdatomic.h>
#include "tally.h"

static void debug_on(void) { cr_assert_eq(tally_option_set("debug", "1"), 0); }

static struct child_result expect_report(void (*fn)(void *), const char *text)
{
    struct child_result r = run_in_child(fn, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "child should abort; stderr: %s", r.err);
    cr_assert(strstr(r.err, text) != NULL, "stderr lacks '%s': %s", text, r.err);
    return r;
}

static void overflow(void *arg)
{
    (void)arg;
    debug_on();
    char *volatile p = malloc(100);
    p[100] = 1;
    free(p);
}

static void underflow(void *arg)
{
    (void)arg;
    debug_on();
    char *volatile p = malloc(100);
    p[-1] = 1;
    free(p);
}

static void double_free(void *arg)
{
    (void)arg;
    debug_on();
    void *volatile p = malloc(40);
    void *volatile q = malloc(40);
    free(p);
    free(q);             /* p is no longer the head of any free list */
    free(p);
}

static void interior_free(void *arg)
{
    (void)arg;
    debug_on();
    char *volatile p = malloc(100);
    free(p + 16);
}

static void use_after_free_write(void *arg)
{
    (void)arg;
    debug_on();
    tally_option_set("quarantine", "0");
    tally_option_set("quarantine", "1m");
    char *volatile p = malloc(200);
    free(p);
    p[50] = 7;                              /* write into freed memory */
    tally_option_set("quarantine", "0");   /* the next free evicts p */
    free(malloc(10));
}

static void realloc_after_free(void *arg)
{
    (void)arg;
    debug_on();
    void *volatile p = malloc(30);
    free(p);
    p = realloc(p, 60);
}

/* A block bigger than the quarantine budget (4 MiB) stays in quarantine
 * until the next free: evicted at once, its address came back for the
 * next request of its size, and the second free released that block. */
static void double_free_of_a_block_past_the_quarantine(void *arg)
{
    (void)arg;
    debug_on();
    void *volatile p = malloc(5000000);
    free(p);
    void *volatile q = malloc(5000000);
    free(p);
    free(q);
}

static void usable_size_after_free(void *arg)
{
    (void)arg;
    debug_on();
    void *volatile p = malloc(100);
    free(p);
    printf("%zu\n", malloc_usable_size(p));
}

Test(debug, overflow_is_reported_with_address_size_and_site)
{
    struct child_result r = expect_report(overflow, "free(): heap buffer overflow");
    cr_assert(strstr(r.err, "offset +100"), "%s", r.err);
    cr_assert(strstr(r.err, "size 100"), "%s", r.err);
    cr_assert(strstr(r.err, "allocated at "), "%s", r.err);
    cr_assert(strstr(r.err, "detected at "), "%s", r.err);
}

Test(debug, underflow_is_reported) { expect_report(underflow, "heap buffer underflow"); }

Test(debug, double_free_names_both_frees)
{
    struct child_result r = expect_report(double_free, "free(): double free");
    cr_assert(strstr(r.err, "freed at "), "%s", r.err);
}

Test(debug, interior_pointer_is_an_invalid_free)
{
    expect_report(interior_free, "free(): invalid pointer");
}

Test(debug, write_after_free_is_caught_on_reuse)
{
    struct child_result r = expect_report(use_after_free_write, "use after free");
    cr_assert(strstr(r.err, "offset 50"), "%s", r.err);
}

Test(debug, double_free_of_a_block_larger_than_the_quarantine)
{
    expect_report(double_free_of_a_block_past_the_quarantine, "free(): double free");
}

Test(debug, usable_size_of_a_freed_block)
{
    expect_report(usable_size_after_free, "malloc_usable_size(): use after free");
}

Test(debug, realloc_of_freed_block) { expect_report(realloc_after_free, "realloc(): use after free"); }

static void overflow_no_abort(void *arg)
{
    (void)arg;
    debug_on();
    tally_option_set("abort", "0");
    char *volatile p = malloc(10);
    p[12] = 1;
    free(p);
    fprintf(stderr, "still running\n");
}

Test(debug, abort_0_reports_and_continues)
{
    struct child_result r = run_in_child(overflow_no_abort, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "%s", r.err);
    cr_assert(strstr(r.err, "heap buffer overflow"), "%s", r.err);
    cr_assert(strstr(r.err, "still running"), "%s", r.err);
}

Test(debug, new_memory_is_junk_and_calloc_is_zero)
{
    debug_on();
    unsigned char *p = malloc(64), *z = calloc(8, 8);
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(p[i], 0xA5);
        cr_assert_eq(z[i], 0);
    }
    cr_assert_eq(malloc_usable_size(p), 64, "debug blocks are exactly as big as asked");
    free(p);
    free(z);
}

Test(debug, tally_check_finds_a_trampled_fence)
{
    debug_on();
    tally_option_set("abort", "0");
    cr_assert_eq(tally_check(), 0);
    char *volatile p = malloc(32);
    cr_assert_eq(tally_check(), 0);
    p[33] = 'x';
    cr_redirect_stderr();
    cr_assert_eq(tally_check(), 1);
    p[33] = (char)0xFD;
    cr_assert_eq(tally_check(), 0);
    free(p);
}

Test(debug, switching_on_and_off_mid_run_is_safe)
{
    void *plain[100], *debugged[100];
    for (int i = 0; i < 100; i++)
        plain[i] = malloc((size_t)i * 13 + 1);
    debug_on();
    for (int i = 0; i < 100; i++)
        debugged[i] = malloc((size_t)i * 17 + 1);
    for (int i = 0; i < 50; i++) {
        free(plain[i]);                       /* no metadata: freed plainly */
        plain[i] = realloc(plain[i + 50], 5000);  /* plain -> debug block */
    }
    cr_assert_eq(tally_option_set("debug", "0"), 0);
    for (int i = 0; i < 100; i++)
        debugged[i] = realloc(debugged[i], (size_t)i * 3 + 1);  /* still checked */
    for (int i = 0; i < 100; i++)
        free(debugged[i]);
    for (int i = 0; i < 50; i++)
        free(plain[i]);
    void *after = malloc(10);
    free(after);
}

/* A debug block outlives the mode: freed once debug is off, it is still
 * checked (its fence found trampled here). free() looks a large block up
 * once to tell a debug block from a plain one (raw_free_plain); a large
 * block freed plainly would go without a report. */
static void large_overflow_freed_after_debug_off(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    debug_on();
    char *volatile p = malloc(n);
    cr_assert_eq(tally_option_set("debug", "0"), 0);
    p[n] = 1;
    free(p);
}

Test(debug, a_large_debug_block_freed_after_the_mode_is_off_is_still_checked)
{
    static const size_t sizes[] = { 100000, 3u << 20 };    /* a span run, a mapping */
    for (int i = 0; i < 2; i++) {
        struct child_result r = run_in_child(large_overflow_freed_after_debug_off,
                                             (void *)(uintptr_t)sizes[i]);
        cr_assert_eq(child_signal(&r), SIGABRT, "%zu B: child should abort; stderr: %s",
                     sizes[i], r.err);
        cr_assert(strstr(r.err, "heap buffer overflow") != NULL, "%zu B: stderr: %s", sizes[i],
                  r.err);
    }
}

Test(debug, large_and_aligned_debug_blocks)
{
    debug_on();
    void *big = malloc(3 << 20);
    cr_assert_not_null(big);
    memset(big, 1, 3 << 20);
    void *al = NULL;
    cr_assert_eq(posix_memalign(&al, 4096, 1000), 0);
    cr_assert_eq((uintptr_t)al % 4096, 0);
    memset(al, 2, 1000);
    big = realloc(big, 5 << 20);
    cr_assert_eq(((unsigned char *)big)[(3 << 20) - 1], 1);
    free(big);
    free(al);
    cr_assert_eq(tally_check(), 0);
}

static __attribute__((noinline)) void *leak_here(size_t n)
{
    void *volatile p = malloc(n);
    return p;
}

static void leaky(void *arg)
{
    (void)arg;
    debug_on();
    for (int i = 0; i < 3; i++)
        (void)leak_here(1000);
    void *volatile other = malloc(77);
    (void)other;
    size_t n = tally_report_leaks();
    fprintf(stderr, "leaked=%zu\n", n);
    _exit(0);
}

Test(debug, leak_report_groups_by_site_largest_first)
{
    struct child_result r = run_in_child(leaky, NULL);
    cr_assert(strstr(r.err, "leaked=4"), "%s", r.err);
    char *a = strstr(r.err, "3000 bytes in 3 blocks allocated at ");
    char *b = strstr(r.err, "77 bytes in 1 blocks allocated at ");
    cr_assert(a && b && a < b, "%s", r.err);
}

static __attribute__((noinline)) void *leak_deep(int depth)
{
    void *volatile p = depth ? leak_deep(depth - 1) : malloc(24);
    return p;
}

static void leaky_deep(void *arg)
{
    (void)arg;
    debug_on();
    cr_assert_eq(tally_option_set("backtrace", "16"), 0);
    (void)leak_deep(20);
    tally_report_leaks();
    fprintf(stderr, "done\n");
    _exit(0);
}

/* Each recorded frame is a line of up to ~90 bytes: a site's 16 frames
 * must stream out, not stop where the report's buffer fills. */
Test(debug, leak_report_prints_every_recorded_frame)
{
    struct child_result r = run_in_child(leaky_deep, NULL);
    char *site = strstr(r.err, "24 bytes in 1 blocks allocated at ");
    cr_assert(site, "%s", r.err);
    int frames = 0;
    for (char *l = strchr(site, '\n'); l && strncmp(l + 1, "      ", 6) == 0;
         l = strchr(l + 1, '\n'))
        frames++;
    cr_assert_eq(frames, 15, "the site line and 15 more frames: %s", r.err);
    cr_assert(strstr(r.err, ")\ndone\n"), "%s", r.err);
}

/* 1088 call sites, each its own return address, more than the report's
 * table of 1023 sites holds. */
#define SITES_4(x) x x x x
#define SITES_1088(x) SITES_4(SITES_4(SITES_4(SITES_4(SITES_4(x))))) SITES_4(SITES_4(SITES_4(x)))

static void *volatile leak_keep[1088];

static void leaky_everywhere(void *arg)
{
    (void)arg;
    int n = 0;
    char path[64], head[128] = { 0 };
    snprintf(path, sizeof path, "/tmp/tally-leaks-%d", (int)getpid());
    debug_on();
    cr_assert_eq(tally_option_set("report", path), 0);   /* 50 sites overflow r.err */
    SITES_1088(leak_keep[n++] = malloc(8);)
    size_t leaked = tally_report_leaks();
    FILE *f = fopen(path, "r");
    if (f && fgets(head, sizeof head, f))
        fprintf(stderr, "%sleaked=%zu of %d\n", head, leaked, n);
    unlink(path);
    _exit(0);
}

/* Sites past the table's room are not listed, but their blocks still
 * count in the totals and the returned number. */
Test(debug, leak_report_counts_blocks_of_every_site)
{
    struct child_result r = run_in_child(leaky_everywhere, NULL);
    cr_assert(strstr(r.err, "tally: leak report: 1088 debug blocks (8704 bytes)"), "%s", r.err);
    cr_assert(strstr(r.err, "leaked=1088 of 1088"), "%s", r.err);
}

Test(debug, same_binary_detects_overflow_only_with_debug_on)
{
    char out[4096], cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_overflow 2>&1", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert_str_eq(out, "no error seen\n");
    snprintf(cmd, sizeof cmd, "TALLY_OPTIONS=debug=1 LD_PRELOAD=%s ./prog_overflow 2>&1",
             tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 128 + SIGABRT, "%s", out);
    cr_assert(strstr(out, "free(): heap buffer overflow"), "%s", out);
    cr_assert(strstr(out, "prog_overflow+0x"), "site names the program: %s", out);
}

Test(debug, debug_blocks_freed_in_bulk_never_come_back_as_plain_blocks)
{
    /* Freeing many debug blocks sends their containers to the debug heap in
     * transfer buffers; nobody allocates debug blocks meanwhile, so that
     * heap's stack grows deep, which is when a freeing thread adopts the
     * blocks instead. Debug blocks must never be adopted: handed out as
     * plain blocks, their free would be taken for a corrupt debug free. */
    enum { N = 3000 };
    static void *v[N];
    free(malloc(64));                   /* this thread has a heap */
    cr_assert_eq(tally_option_set("quarantine", "0"), 0);   /* free at once */
    debug_on();
    for (int i = 0; i < N; i++)
        v[i] = malloc(64);
    for (int i = 0; i < N; i++)
        free(v[i]);
    cr_assert_eq(tally_option_set("debug", "0"), 0);
    for (int i = 0; i < N; i++) {         /* whatever class a container had */
        size_t size = 16 + (size_t)(i % 64) * 8;
        v[i] = malloc(size);
        memset(v[i], 0x3c, size);
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
}

/* tally_check() reports without aborting; that must not spill over to
 * another thread's misuse found meanwhile, which aborts as always. */
static atomic_int checks;

static void *check_forever(void *arg)
{
    (void)arg;
    for (;;) {
        tally_check();
        atomic_fetch_add(&checks, 1);
    }
    return NULL;
}

static void double_free_during_checks(void *arg)
{
    (void)arg;
    debug_on();
    for (int i = 0; i < 50000; i++)
        (void)malloc(16);           /* live blocks for every check to walk */
    static void *volatile freed[100];
    for (int i = 0; i < 100; i++) {
        freed[i] = malloc(40);
        free(freed[i]);             /* in quarantine */
    }
    pthread_t t;
    pthread_create(&t, NULL, check_forever, NULL);
    while (atomic_load(&checks) < 1)
        ;
    for (int i = 0; i < 100; i++)
        free(freed[i]);             /* double frees: the first must abort */
    fprintf(stderr, "100 double frees survived\n");
    _exit(0);
}

Test(debug, a_misuse_found_while_another_thread_checks_still_aborts, .timeout = 60)
{
    struct child_result r = run_in_child(double_free_during_checks, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "%s", r.err + strlen(r.err) / 2);
    cr_assert(strstr(r.err, "free(): double free"), "%s", r.err);
}

/* As in plain mode (oom::a_shrinking_realloc_never_fails), a shrink never
 * fails: before, debug mode always moved the block and returned NULL with
 * ENOMEM when the new block's mapping was refused. */
static void shrink_with_the_mmap_refused(void *arg)
{
    (void)arg;
    unsigned char *plain = malloc(2 << 20);
    debug_on();
    unsigned char *dbg = malloc(2 << 20);
    if (!plain || !dbg)
        _exit(10);
    memset(plain, 7, 2 << 20);
    memset(dbg, 8, 2 << 20);
    tally_option_set("test_fail_mmap", "1");
    unsigned char *a = realloc(dbg, 1 << 20);
    tally_option_set("test_fail_mmap", "1");
    unsigned char *b = realloc(plain, 1 << 20);
    tally_option_set("test_fail_mmap", "0");
    if (!a || !b)
        _exit(11);
    if (a[0] != 8 || a[(1 << 20) - 1] != 8 || b[0] != 7 || b[(1 << 20) - 1] != 7)
        _exit(12);
    if (malloc_usable_size(a) != 1 << 20 || tally_check() != 0)
        _exit(13);
    free(a);
    free(b);
    _exit(0);
}

Test(debug, a_shrinking_realloc_never_fails)
{
    struct child_result r = run_in_child(shrink_with_the_mmap_refused, NULL);
    cr_assert(WIFEXITED(r.status), "child crashed: %s", r.err);
    cr_assert_eq(WEXITSTATUS(r.status), 0, "child failed step %d: %s", WEXITSTATUS(r.status),
                 r.err);
}

/* A pointer into the debug heap's segment header, in front of every block:
 * no block holds it, and it was taken for a large block, whose header is
 * read in front of the pointer: in the mapping before the segment,
 * unmapped (SIGSEGV instead of the report). */
static void free_into_debug_segment_header(void *arg)
{
    (void)arg;
    debug_on();
    uintptr_t b = (uintptr_t)malloc(64);
    char *volatile p = (char *)((b & ~(uintptr_t)((4u << 20) - 1)) + 64);
    free(p);
}

Test(debug, a_pointer_into_the_debug_heaps_segment_header_is_an_invalid_free)
{
    expect_report(free_into_debug_segment_header, "free(): invalid pointer");
}
