/*
 * test_api.c - the contract of every exported malloc-family function.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include "tally.h"
#include "../alloc/sizeclass.h"
#include "../alloc/span.h"

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 31 + seed);
}

static int check(const unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != (unsigned char)(i * 31 + seed))
            return 0;
    return 1;
}

Test(api, malloc_zero_is_unique_and_freeable)
{
    void *a = malloc(0), *b = malloc(0);
    cr_assert(a && b && a != b);
    free(a);
    free(b);
}

Test(api, malloc_is_16_byte_aligned_and_usable_to_the_end)
{
    for (size_t n = 1; n < 70000; n += (n < 300 ? 1 : 97)) {
        unsigned char *p = malloc(n);
        cr_assert(p != NULL, "malloc(%zu)", n);
        cr_assert_eq((uintptr_t)p % 16, 0, "malloc(%zu) = %p", n, (void *)p);
        size_t u = malloc_usable_size(p);
        cr_assert_geq(u, n);
        fill(p, u, (unsigned)n);
        cr_assert(check(p, u, (unsigned)n));
        free(p);
    }
}

Test(api, a_block_is_its_class_or_a_lending_neighbour)
{
    /* The spacing itself (at most a quarter over) is test_sizeclass's; here
     * the block malloc hands out is its class's size, or, for a small class
     * with no room of its own, one of the next SIZECLASS_BORROW_REACH. */
    for (size_t n = 1; n <= MEDIUM_MAX; n += (n < 9000 ? 1 : 61)) {
        void *p = malloc(n);
        size_t u = malloc_usable_size(p);
        unsigned c = sizeclass_of(n);
        unsigned reach = c >= SIZECLASS_BORROW_FIRST && c < NUM_SMALL_CLASSES
                             ? SIZECLASS_BORROW_REACH : 0;
        unsigned end = c < NUM_SMALL_CLASSES ? NUM_SMALL_CLASSES : NUM_CLASSES;
        /* Above SPAN_MIN, a span block while the span gate is open: whole
         * units (alloc/span.h). */
        int ok = n > SPAN_MIN && u >= n && u - n < SPAN_UNIT;
        for (unsigned k = 0; k <= reach && c + k < end; k++)
            ok |= u == sizeclass_block_size[c + k];
        cr_assert(ok, "size %zu (class of %u B) usable %zu", n, sizeclass_block_size[c], u);
        free(p);
    }
}

Test(api, aligned_family_honours_alignment_up_to_1MiB)
{
    static const size_t sizes[] = { 1, 8, 24, 100, 1000, 4096, 5000, 70000, 600000, 3 << 20 };
    for (size_t a = 16; a <= (1 << 20); a <<= 1) {
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            void *p = NULL;
            cr_assert_eq(posix_memalign(&p, a, n), 0, "align %zu size %zu", a, n);
            cr_assert_eq((uintptr_t)p % a, 0, "posix_memalign(%zu, %zu) = %p", a, n, p);
            cr_assert_geq(malloc_usable_size(p), n);
            memset(p, 0x5a, n);
            void *q = aligned_alloc(a, n);
            cr_assert(q && (uintptr_t)q % a == 0, "aligned_alloc(%zu, %zu)", a, n);
            memset(q, 0x5a, n);
            void *r = memalign(a, n);
            cr_assert(r && (uintptr_t)r % a == 0, "memalign(%zu, %zu)", a, n);
            memset(r, 0x5a, n);
            free(p);
            free(q);
            free(r);
        }
    }
}

/* The aligned family's fast lane pops its class's current page (malloc.c,
 * aligned_take). In a new thread's young heap, malloc(140) is served from
 * the 160 B class's pages (pairs); the aligned requests after the frees
 * take those blocks back off the lists, and must still be aligned and
 * apart. The lane takes medium sizes too: 70,000 B blocks (the 72 KiB
 * class, 8 KiB aligned) come back for alignments up to 8 KiB, and 16 and
 * 64 KiB need a class of their own. Counts what is wrong. */
static int aligned_reuse_size(size_t size, int n, const size_t *aligns, size_t naligns)
{
    int bad = 0;
    unsigned char *v[300];
    for (size_t a = 0; a < naligns; a++) {
        for (int i = 0; i < n; i++)
            v[i] = malloc(size);
        for (int i = 0; i < n; i++)
            free(v[i]);
        for (int i = 0; i < n; i++) {
            v[i] = aligned_alloc(aligns[a], size);
            if (!v[i] || (uintptr_t)v[i] % aligns[a] || malloc_usable_size(v[i]) < size)
                ++bad;
            else
                memset(v[i], i & 0xff, size);
        }
        for (int i = 0; i < n; i++) {
            for (size_t k = 0; v[i] && k < size; k++)
                if (v[i][k] != (i & 0xff)) {
                    ++bad;      /* two blocks overlap */
                    break;
                }
            free(v[i]);
        }
    }
    return bad;
}

static void *aligned_reuse(void *arg)
{
    int *bad = arg;
    static const size_t small[] = { 16, 32, 64, 128, 256, 4096 };
    static const size_t medium[] = { 16, 64, 1024, 8192, 16384, 65536 };
    *bad += aligned_reuse_size(140, 300, small, sizeof small / sizeof small[0]);
    *bad += aligned_reuse_size(70000, 40, medium, sizeof medium / sizeof medium[0]);
    return NULL;
}

Test(api, aligned_blocks_reused_off_a_young_heaps_lists_stay_aligned_and_apart)
{
    int bad = 0;
    run_in_thread(aligned_reuse, &bad);
    cr_assert_eq(bad, 0, "%d aligned blocks misplaced", bad);
}

Test(api, valloc_and_pvalloc_are_page_aligned)
{
    long page = sysconf(_SC_PAGESIZE);
    void *v = valloc(10);
    cr_assert(v && (uintptr_t)v % (uintptr_t)page == 0);
    void *pv = pvalloc(10);
    cr_assert(pv && (uintptr_t)pv % (uintptr_t)page == 0);
    cr_assert_geq(malloc_usable_size(pv), (size_t)page);
    free(v);
    free(pv);
}

Test(api, bad_alignment_is_einval)
{
    void *p = (void *)1;
    cr_assert_eq(posix_memalign(&p, 3, 10), EINVAL);
    cr_assert_eq(posix_memalign(&p, 0, 10), EINVAL);
    cr_assert_eq(posix_memalign(&p, 4, 10), EINVAL);
    cr_assert_eq(p, (void *)1, "posix_memalign must not touch *out on failure");
    errno = 0;
    cr_assert_null(aligned_alloc(24, 10));
    cr_assert_eq(errno, EINVAL);
}

/* memalign as glibc's: an alignment that is not a power of two is rounded
 * up to the next one (0 and 1 ask for none), and one above SIZE_MAX / 2 + 1,
 * which has no power of two to round up to, is EINVAL. */
Test(api, memalign_rounds_odd_alignments_up_as_glibc_does)
{
    static const size_t odd[] = { 0, 1, 3, 24, 100, 3000, 5000, 70000 };
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        size_t want = 1;
        while (want < odd[i])
            want <<= 1;
        char *p = memalign(odd[i], 200);
        cr_assert_not_null(p, "memalign(%zu, 200)", odd[i]);
        cr_assert_eq((uintptr_t)p % want, 0, "memalign(%zu) = %p, not %zu-aligned", odd[i],
                     (void *)p, want);
        memset(p, 1, 200);
        free(p);
    }
    errno = 0;
    cr_assert_null(memalign(((size_t)1 << 63) + 1, 1));
    cr_assert_eq(errno, EINVAL);
    errno = 0;
    cr_assert_null(memalign(SIZE_MAX, 1));
    cr_assert_eq(errno, EINVAL);
}

Test(api, impossible_sizes_are_enomem)
{
    errno = 0;
    cr_assert_null(malloc(SIZE_MAX));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(malloc((size_t)PTRDIFF_MAX + 1));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(calloc(SIZE_MAX / 2, 3));
    cr_assert_eq(errno, ENOMEM);
    void *p = malloc(10);
    errno = 0;
    cr_assert_null(reallocarray(p, SIZE_MAX / 2, 3));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(realloc(p, SIZE_MAX - 10));
    cr_assert_eq(errno, ENOMEM);
    void *al = NULL;
    cr_assert_eq(posix_memalign(&al, 64, SIZE_MAX - 10), ENOMEM);
    /* Alignments no mapping can meet: refused before any layer computes
     * with them (2^63 made `PTRDIFF_MAX - align` wrap) or asks the OS. */
    struct tally_stats before = { .size = sizeof before }, after = { .size = sizeof after };
    tally_stats_get(&before);
    cr_assert_eq(posix_memalign(&al, (size_t)1 << 63, 1), ENOMEM);
    cr_assert_eq(posix_memalign(&al, (size_t)1 << 62, 1), ENOMEM);
    errno = 0;
    cr_assert_null(aligned_alloc((size_t)1 << 63, (size_t)1 << 63));
    cr_assert_eq(errno, ENOMEM);
    errno = 0;
    cr_assert_null(memalign((size_t)1 << 63, 1));
    cr_assert_eq(errno, ENOMEM, "glibc's answer for the largest power of two");
    tally_stats_get(&after);
    cr_assert_eq(after.mmap_calls, before.mmap_calls, "an impossible alignment went to mmap");
    cr_assert_null(al);
    /* The heap is still usable and p still valid. */
    memset(p, 1, 10);
    free(p);
    void *q = malloc(100);
    cr_assert_not_null(q);
    free(q);
}

/* A block the kernel could never back (16 TiB) fails with ENOMEM, as
 * under glibc, instead of succeeding as address space only and getting
 * the process killed once it is touched. Not when the kernel is told to
 * overcommit always (vm.overcommit_memory = 1): then glibc's succeeds too. */
Test(api, a_request_the_kernel_cannot_back_is_enomem)
{
    FILE *f = fopen("/proc/sys/vm/overcommit_memory", "r");
    int mode = f && fscanf(f, "%d", &mode) == 1 ? mode : -1;
    if (f)
        fclose(f);
    if (mode == 1)
        cr_skip_test("vm.overcommit_memory is 1");
    size_t huge = (size_t)1 << 44;
    errno = 0;
    cr_assert_null(malloc(huge));
    cr_assert_eq(errno, ENOMEM);
    cr_assert_null(calloc(1, huge));
    void *p = malloc(100);
    cr_assert_null(realloc(p, huge));
    free(p);
}

Test(api, calloc_zeroes_reused_memory)
{
    static const size_t sizes[] = { 16, 200, 4000, 9000, 100000, 400000, 2 << 20 };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        for (int round = 0; round < 3; round++) {
            unsigned char *p = malloc(n);
            memset(p, 0xab, n);
            free(p);
            unsigned char *z = calloc(1, n);
            cr_assert_not_null(z);
            for (size_t k = 0; k < n; k++)
                cr_assert_eq(z[k], 0, "calloc(%zu) byte %zu", n, k);
            free(z);
        }
    }
}

/* calloc leaves a block unwritten when page_extend carved it from memory
 * nothing wrote since it was mapped or purged (page.c). A medium page
 * that held another class's blocks, freed and taken over, is not such
 * memory: every calloc'd block on it must read zero. */
Test(api, calloc_on_medium_pages_other_classes_wrote_is_zero)
{
    static const size_t dirty[] = { 40000, 200000, 480000 };
    static const size_t clean[] = { 30000, 150000, 500000, 9000 };
    unsigned char *v[8];
    for (size_t d = 0; d < sizeof dirty / sizeof dirty[0]; d++) {
        for (int i = 0; i < 8; i++) {
            v[i] = malloc(dirty[d]);
            memset(v[i], 0xab, dirty[d]);
        }
        for (int i = 0; i < 8; i++)
            free(v[i]);
        for (size_t c = 0; c < sizeof clean / sizeof clean[0]; c++) {
            for (int i = 0; i < 8; i++) {
                v[i] = calloc(1, clean[c]);
                cr_assert_not_null(v[i]);
                for (size_t k = 0; k < clean[c]; k += 61)
                    cr_assert_eq(v[i][k], 0, "calloc(%zu) after %zu B blocks: byte %zu",
                                 clean[c], dirty[d], k);
            }
            for (int i = 0; i < 8; i++) {
                memset(v[i], 0xcd, clean[c]);   /* dirty for the next class */
                free(v[i]);
            }
        }
    }
}

/* The other side: a block carved from memory nothing wrote is zero
 * already, and calloc leaves it untouched. 500,000 B in a fresh process
 * (tests/progs/calloc_fresh.c): clearing it took 124 page faults inside
 * calloc; a new segment's header page is all that may fault now. */
Test(api, calloc_of_a_fresh_medium_block_leaves_its_pages_untouched)
{
    char out[128], cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_calloc_fresh", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    long faults = -1;
    char zero[16] = "";
    cr_assert_eq(sscanf(out, "%ld %15s", &faults, zero), 2, "output: %s", out);
    cr_assert_str_eq(zero, "zero");
    cr_assert_leq(faults, 8, "%ld faults inside calloc", faults);
}

/* calloc's fast path (malloc's small lane, then memset) across the sweep
 * tick: every 256th block it hands out takes calloc_ticked, which must
 * clear the block too. Each calloc gets the dirty block just freed. */
Test(api, calloc_is_zero_on_every_call_of_a_long_run)
{
    for (int i = 0; i < 2000; i++) {
        unsigned char *p = malloc(48);
        memset(p, 0xcd, 48);
        free(p);
        unsigned char *z = calloc(3, 16);
        cr_assert_not_null(z);
        for (int k = 0; k < 48; k++)
            cr_assert_eq(z[k], 0, "call %d byte %d", i, k);
        free(z);
    }
}

Test(api, realloc_keeps_contents_small_medium_large)
{
    static const size_t steps[] = { 1, 17, 100, 1000, 8192, 9000, 60000, 300000, 600000,
                                    2 << 20, 10 << 20, 1 << 20, 50000, 500, 8, 64 << 20, 3 };
    unsigned char *p = NULL;
    size_t have = 0;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        size_t n = steps[i];
        p = realloc(p, n);
        cr_assert_not_null(p, "realloc to %zu", n);
        size_t keep = have < n ? have : n;
        cr_assert(check(p, keep, 7), "contents lost in realloc %zu -> %zu", have, n);
        fill(p, n, 7);
        have = n;
    }
    free(p);
}

Test(api, realloc_of_large_blocks_up_to_256MiB)
{
    unsigned char *p = malloc(1 << 20);
    fill(p, 1 << 20, 3);
    for (size_t n = 2 << 20; n <= (256u << 20); n *= 2) {
        p = realloc(p, n);
        cr_assert_not_null(p);
        cr_assert(check(p, 1 << 20, 3), "first MiB lost at %zu", n);
        p[n - 1] = 0x42;
    }
    p = realloc(p, 5 << 20);
    cr_assert(check(p, 1 << 20, 3));
    free(p);
}

Test(api, realloc_edge_cases)
{
    void *p = realloc(NULL, 100);
    cr_assert_not_null(p);
    cr_assert_null(realloc(p, 0), "realloc(p, 0) frees and returns NULL as glibc does");
    free(NULL);
    free_sized(malloc(40), 40);
    free_aligned_sized(aligned_alloc(256, 512), 256, 512);
}

Test(api, mallopt_mmap_threshold_and_others)
{
    struct tally_stats before = { .size = sizeof before }, after = { .size = sizeof after };
    cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 64 * 1024), 1);
    tally_stats_get(&before);
    void *p = malloc(100 * 1024);
    tally_stats_get(&after);
    cr_assert_eq(after.large_count, before.large_count + 1,
                 "a block above the threshold is its own mapping");
    free(p);
    cr_assert_eq(mallopt(M_MMAP_THRESHOLD, 512 * 1024), 1);
    tally_stats_get(&before);
    p = malloc(30 * 1024);      /* below the threshold and SPAN_MIN: a class block */
    tally_stats_get(&after);
    cr_assert_eq(after.large_count, before.large_count);
    free(p);
    /* glibc's other parameters mean nothing here: accepted, as glibc does. */
    cr_assert_eq(mallopt(M_ARENA_MAX, 4), 1);
    cr_assert_eq(mallopt(M_TRIM_THRESHOLD, 1 << 20), 1);
    cr_assert_eq(mallopt(M_MXFAST, 1 << 20), 0, "beyond glibc's fastbins: refused, as glibc does");
    cr_assert_eq(mallopt(M_MMAP_THRESHOLD, -1), 0);
}

Test(api, mallinfo2_counts_allocations)
{
    struct mallinfo2 a = mallinfo2();
    void *blocks[1000];
    for (int i = 0; i < 1000; i++)
        blocks[i] = malloc(1000);
    struct mallinfo2 b = mallinfo2();
    cr_assert_geq(b.uordblks - a.uordblks, 1000 * 1000);
    void *big = malloc(8 << 20);
    struct mallinfo2 c = mallinfo2();
    cr_assert_eq(c.hblks, b.hblks + 1);
    cr_assert_geq(c.hblkhd - b.hblkhd, (size_t)8 << 20);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    struct mallinfo old = mallinfo();
#pragma GCC diagnostic pop
    cr_assert_geq((size_t)old.uordblks, 1000 * 1000);
    free(big);
    for (int i = 0; i < 1000; i++)
        free(blocks[i]);
}

Test(api, tally_options_by_name)
{
    uint64_t v = 0;
    cr_assert_eq(tally_option_get("mmap_threshold", &v), 0);
    cr_assert_eq(v, 512 * 1024);
    cr_assert_eq(tally_option_set("purge_delay", "25"), 0);
    cr_assert_eq(tally_option_get("purge_delay", &v), 0);
    cr_assert_eq(v, 25);
    cr_assert_eq(tally_option_set("mmap_threshold", "256k"), 0);
    cr_assert_eq(tally_option_get("mmap_threshold", &v), 0);
    cr_assert_eq(v, 256 * 1024);
    errno = 0;
    cr_assert_eq(tally_option_set("no_such_option", "1"), -1);
    cr_assert_eq(errno, EINVAL);
    cr_assert_eq(tally_option_set("purge_delay", "soon"), -1);
    cr_assert_str_eq(tally_version(), "0.1.0");
}

Test(api, stats_struct_checks_its_size)
{
    struct tally_stats s = { .size = 4 };
    errno = 0;
    cr_assert_eq(tally_stats_get(&s), -1);
    cr_assert_eq(errno, EINVAL);
    /* An older, shorter struct is filled only up to its size. */
    unsigned char buf[sizeof(struct tally_stats) + 16];
    memset(buf, 0xee, sizeof buf);
    struct tally_stats *old = (struct tally_stats *)buf;
    old->size = offsetof(struct tally_stats, large_count);
    cr_assert_eq(tally_stats_get(old), 0);
    cr_assert_eq(old->version, TALLY_STATS_VERSION);
    cr_assert_eq(buf[offsetof(struct tally_stats, large_count)], 0xee);
}

Test(api, zero_size_aligned_blocks_at_every_alignment)
{
    /* Found by the fuzzer: with size 0 and an alignment of 4 MiB, the
     * block once started at the end of its own mapping. */
    for (size_t a = 16; a <= ((size_t)64 << 20); a <<= 1) {
        void *p = NULL;
        cr_assert_eq(posix_memalign(&p, a, 0), 0, "align %zu", a);
        cr_assert_eq((uintptr_t)p % a, 0);
        (void)malloc_usable_size(p);
        free(p);
        void *q = aligned_alloc(a, 0);
        cr_assert_not_null(q);
        free(q);
    }
}

/* A key alone means "=1" for a number; `report` alone has no path to
 * take, and must not send the reports to a file named "1". */
Test(api, report_without_a_value_is_a_bad_value)
{
    char dir[] = "/tmp/tally-report-XXXXXX", out[4096], cmd[1024], one[64];
    cr_assert(mkdtemp(dir));
    snprintf(cmd, sizeof cmd,
             "cd %s && TALLY_OPTIONS=report,stats=1 LD_PRELOAD=%s %s/prog_plain 2>&1", dir,
             tally_lib(), getcwd(out, sizeof out));
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    snprintf(one, sizeof one, "%s/1", dir);
    bool made = access(one, F_OK) == 0;
    unlink(one);
    rmdir(dir);
    cr_assert(!made, "a report file named 1");
    cr_assert(strstr(out, "tally: warning: TALLY_OPTIONS: bad value ignored: report"), "%s", out);
    cr_assert(strstr(out, "tally: statistics"), "the report on stderr: %s", out);
}

/* glibc's own names (alloc/malloc.c): a block from one of them goes back
 * through free() and the rest, and the other way round. Before tally
 * exported them, __libc_malloc's block reached glibc's allocator and
 * tally's malloc_usable_size aborted on it. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);
extern void cfree(void *);

static void glibc_names(void *arg)
{
    (void)arg;
    unsigned char *p = __libc_malloc(100);
    if (!p || malloc_usable_size(p) < 100)
        _exit(2);
    fill(p, 100, 7);
    p = __libc_realloc(p, 5000);
    if (!p || !check(p, 100, 7) || malloc_usable_size(p) < 5000)
        _exit(3);
    free(p);
    unsigned char *z = __libc_calloc(10, 100);
    for (int i = 0; z && i < 1000; i++)
        if (z[i])
            _exit(4);
    void *a = __libc_memalign(256, 300), *v = __libc_valloc(10), *pv = __libc_pvalloc(10);
    if (!z || !a || (uintptr_t)a % 256 || !v || (uintptr_t)v % 4096 || !pv ||
        malloc_usable_size(pv) < 4096)
        _exit(5);
    __libc_free(z);
    free(a);
    cfree(v);
    __libc_free(pv);
    __libc_free(malloc(64));
}

Test(api, glibcs_own_names_reach_the_same_heap)
{
    struct child_result r = run_in_child(glibc_names, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
              "status %#x, stderr: %s", r.status, r.err);
}

static void print_stats(void *arg)
{
    (void)arg;
    void *p = malloc(777);
    malloc_stats();
    free(p);
}

Test(api, malloc_stats_and_malloc_info_print_tallys_figures)
{
    struct child_result r = run_in_child(print_stats, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
    cr_assert(strstr(r.err, "tally: statistics") && strstr(r.err, "allocated_bytes"),
              "malloc_stats printed: %s", r.err);

    struct tally_stats before = { .size = sizeof before };
    tally_stats_get(&before);
    void *big = malloc(3 << 20);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    cr_assert(f);
    cr_assert_eq(malloc_info(0, f), 0);
    fclose(f);
    cr_assert(strstr(text, "<malloc version=\"1\">") && strstr(text, "</malloc>"), "%s", text);
    unsigned long long count = 0, size = 0;
    const char *mmap = strstr(text, "<total type=\"mmap\"");
    cr_assert(mmap && sscanf(mmap, "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"", &count,
                             &size) == 2, "%s", text);
    cr_assert_geq(count, before.large_count + 1, "%s", text);
    cr_assert_geq(size, before.large_bytes + (3 << 20), "%s", text);
    free(text);
    free(big);
    cr_assert_eq(malloc_info(1, stdout), EINVAL);
}
