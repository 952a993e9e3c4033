/*
 * test_span.c - large blocks from shared span segments (alloc/span.h):
 * freed runs join and serve requests of any size warm, blocks grow into
 * free units where they lie, and the gate sends sparsely written blocks
 * back to classes and mappings.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <inttypes.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "tally.h"
#include "../alloc/span.h"
#include "../alloc/large_cache.h"

/* Every mincore call in this test binary, tally's included: this
 * definition interposes on libc's (the library calls it through its PLT),
 * and forwards to the kernel. */
static _Atomic long mincore_calls;
int mincore(void *addr, size_t length, unsigned char *vec)
{
    mincore_calls++;
    return (int)syscall(SYS_mincore, addr, length, vec);
}

static struct tally_stats stats(void)
{
    struct tally_stats s = { .size = sizeof s };
    tally_stats_get(&s);
    return s;
}

/* Two large blocks freed in a row arm the keeping of freed blocks (the
 * large cache's rule, which spans follow); each 600 KiB, written to n. */
static void arm_written(size_t n)
{
    char *a = malloc(600u << 10), *b = malloc(600u << 10);
    cr_assert(a && b);
    memset(a, 1, n);
    memset(b, 1, n);
    free(a);
    free(b);
}

static void arm(void) { arm_written(600u << 10); }

static char *written(size_t n, int byte)
{
    char *p = malloc(n);
    cr_assert_not_null(p);
    memset(p, byte, n);
    return p;
}

Test(span, a_round_of_other_sizes_reuses_the_last_rounds_pages)
{
    /* A server's buffers: 8 of 900 KiB written and freed, then 12 of 550
     * KiB. With a mapping or a medium class each, the smaller round found
     * 8 blocks of its size at most and faulted the rest in afresh. */
    enum { A = 8, B = 12 };
    char *v[B];
    arm();
    for (int i = 0; i < A; i++)
        v[i] = written(900u << 10, i);
    for (int i = 0; i < A; i++)
        free(v[i]);
    long f0 = minor_faults();
    for (int i = 0; i < B; i++)
        v[i] = written(550u << 10, i + 1);
    long faults = minor_faults() - f0;
    for (int i = 0; i < B; i++) {
        cr_assert_eq(v[i][(550u << 10) - 1], i + 1);
        free(v[i]);
    }
    cr_assert_lt(faults, 100, "12 blocks of 550 KiB after 8 of 900 KiB took %ld faults", faults);
}

/* A few live blocks of random sizes, each replaced in turn: once their
 * peak is reached, the freed units serve the next sizes without faulting
 * them in again. The peak rule's eighth of a small peak is a unit or two,
 * and a block of a size no resident run fitted took fresh units and
 * purged others (w_large -b 1024: 14k faults a run against tcmalloc's
 * 3.4k; span.c, SPAN_SLACK_MIN). */
Test(span, a_few_blocks_of_random_sizes_churn_without_faulting_their_pages_again)
{
    enum { LIVE = 8, WARM = 400, ROUNDS = 800 };
    static char *v[LIVE];
    static size_t sz[LIVE];
    uint64_t x = 88172645463325252ull;
    long faults = 0;
    for (int i = 0; i < WARM + ROUNDS; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        unsigned j = (unsigned)(x % LIVE);
        size_t n = (256u << 10) + (size_t)((x >> 8) % (768u << 10));
        if (i == WARM)
            faults = minor_faults();
        free(v[j]);
        v[j] = malloc(n);
        cr_assert_not_null(v[j]);
        for (size_t o = 0; o < n; o += 4096)
            v[j][o] = (char)i;
        sz[j] = n;
    }
    faults = minor_faults() - faults;
    for (int j = 0; j < LIVE; j++) {
        cr_assert_eq(v[j][sz[j] - 1 - (sz[j] - 1) % 4096], v[j][0]);
        free(v[j]);
    }
    /* 800 blocks of 140 pages on average: 112k pages written. */
    cr_assert_lt(faults, 2000, "%ld faults in %d replacements", faults, ROUNDS);
}

Test(span, freed_neighbours_join_for_a_bigger_block)
{
    /* Three 300 KiB blocks side by side in a fresh segment, freed: one run,
     * which a 900 KiB request takes where the first one was. Each run is
     * the block in whole units, no more. */
    char *a = written(300u << 10, 1), *b = written(300u << 10, 2), *c = written(300u << 10, 3);
    ptrdiff_t run = (ptrdiff_t)span_run_size(300u << 10);
    cr_assert_eq(b - a, run, "b follows a (%p, %p)", (void *)a, (void *)b);
    cr_assert_eq(c - b, run, "c follows b (%p, %p)", (void *)b, (void *)c);
    free(a);
    free(b);
    free(c);
    char *d = malloc(900u << 10);
    cr_assert_eq(d, a, "the 900 KiB block is not where the freed run starts (%p, %p)", (void *)d,
                 (void *)a);
    memset(d, 4, 900u << 10);
    free(d);
}

Test(span, a_request_takes_the_resident_end_of_a_segments_only_free_run)
{
    /* Five blocks of 51 units fill a fresh segment (255 units after its
     * header's). The fourth is freed and purged, the fifth freed and
     * kept: the segment's only free run is clean at its start, resident
     * at its end, and a request of that size must take the end, where
     * nothing faults (span.c, pick_in: a segment whose free units are
     * one run is weighed without the run search, both ends still). */
    enum { FILL = 5, TRIES = 64 };
    size_t n = (size_t)51 << 14;
    char *v[TRIES + FILL];
    int first = -1, got = 0;
    while (first < 0 && got < TRIES) {
        v[got] = written(n, 1);
        if (((uintptr_t)v[got] & (SEGMENT_SIZE - 1)) == SPAN_UNIT)
            first = got;
        got++;
    }
    cr_assert_geq(first, 0, "no 816 KiB block started a fresh segment in %d", TRIES);
    for (int i = 1; i < FILL; i++) {
        v[got] = written(n, 1);
        cr_assert_eq(v[got], v[first] + (size_t)i * n, "block %d of the fresh segment", i);
        got++;
    }
    char *fourth = v[first + 3], *fifth = v[first + 4];
    char *other = written(2 * SPAN_MIN, 2);     /* a span block too */
    free(fourth);
    malloc_trim(0);             /* purges the fourth's units whatever the arming said */
    free(other);
    free(fifth);                /* a second free since the trim: kept */
    char *again = malloc(n);
    cr_assert_eq(again, fifth, "took %p, not the resident end at %p (the run starts at %p)",
                 (void *)again, (void *)fifth, (void *)fourth);
    memset(again, 3, n);
    free(again);
    for (int i = 0; i < got; i++)
        if (i != first + 3 && i != first + 4)
            free(v[i]);
}

Test(span, a_run_rounds_its_block_up_to_16_kib_at_most)
{
    /* Runs round blocks up to whole units, resident once the units served
     * another block: with 64 KiB units, 500 live buffers of 128-512 KiB
     * held 15 MiB more than they asked for. Blocks of 70,000 B take 80 KiB
     * runs (128 KiB in 64 KiB units). */
    enum { N = 8 };
    size_t n = 70000;
    struct tally_stats before = stats();
    char *v[N];
    for (int i = 0; i < N; i++)
        v[i] = written(n, i + 1);
    struct tally_stats after = stats();
    cr_assert_eq(after.large_count, before.large_count + N, "70,000 B blocks were no span blocks");
    uint64_t run = (after.large_bytes - before.large_bytes) / N;
    cr_assert_leq(run, n + (16u << 10), "a 70,000 B block took a run of %" PRIu64 " B", run);
    for (int i = 0; i < N; i++)
        free(v[i]);
}

Test(span, a_block_grows_into_the_free_units_after_it)
{
    /* No system call: the units after it are free in its segment. */
    char *p = written(600u << 10, 5);
    struct tally_stats s0 = stats();
    char *q = realloc(p, 900u << 10);
    struct tally_stats s1 = stats();
    cr_assert_eq(q, p, "the block moved (%p -> %p)", (void *)p, (void *)q);
    cr_assert_eq(s1.mremap_calls + s1.mmap_calls, s0.mremap_calls + s0.mmap_calls,
                 "growing within the segment called the kernel");
    cr_assert_eq(q[(600u << 10) - 1], 5);
    memset(q, 6, 900u << 10);
    free(q);
}

Test(span, a_shrunk_block_gives_its_tail_units_back_where_it_lies)
{
    /* 300,000 B in a run of 19 units shrunk to 100,000 B: the block stays
     * put in the first 7 units, its bytes intact, and the 12 after it go
     * back to the segment, free and resident, so the next request that
     * fits them lands there (the resident end of the segment's only free
     * run) and faults nothing. Armed first, as the tail goes back like a
     * freed run: kept resident only once the program reuses large blocks
     * (the first free of a process purges). */
    arm();
    char *p = malloc(300000);
    cr_assert_not_null(p);
    for (size_t i = 0; i < 300000; i++)
        p[i] = (char)(i * 11);
    char *q = realloc(p, 100000);
    cr_assert_eq(q, p, "the block moved (%p -> %p)", (void *)p, (void *)q);
    size_t usable = malloc_usable_size(q);
    cr_assert(usable >= 100000 && usable < 300000, "usable size %zu", usable);
    for (size_t i = 0; i < 100000; i++)
        cr_assert_eq(q[i], (char)(i * 11), "byte %zu", i);
    long f0 = minor_faults();
    char *r = malloc(180000);
    cr_assert_eq(r, q + (7u << SPAN_UNIT_SHIFT), "the tail was not reused (%p, block %p)",
                 (void *)r, (void *)q);
    memset(r, 3, 180000);
    long faults = minor_faults() - f0;
    cr_assert_lt(faults, 4, "the reused tail faulted %ld times", faults);
    for (size_t i = 0; i < 100000; i++)
        cr_assert_eq(q[i], (char)(i * 11), "byte %zu after the neighbour's write", i);
    free(r);
    free(q);
}

/* The peak rule (span.h): freed runs stay resident for reuse while they
 * and the live runs fit within the live peak plus its slack (a segment's
 * units at this size). 40 blocks of 300 KiB (19 units each, too big for
 * the thread's keep) make the peak; every other one freed leaves 380
 * units cached in 19-unit holes, which 900 KiB blocks (57 units) cannot
 * use. Six of those take fresh units: cached plus live would pass the
 * bound by the fifth, and the rule purges cached units instead. */
Test(span, fresh_units_past_the_live_peak_purge_cached_ones)
{
    enum { N = 40, GROWN = 6 };
    char *v[N], *g[GROWN];
    arm();
    for (int i = 0; i < N; i++)
        v[i] = written(300u << 10, 1);
    for (int i = 0; i < N; i += 2)
        free(v[i]);
    uint64_t cached = stats().cached_bytes, purged = stats().purged_bytes;
    cr_assert_geq(cached, (uint64_t)(N / 2) * 19 * SPAN_UNIT, "the freed runs were not cached (%llu)",
                  (unsigned long long)cached);
    for (int i = 0; i < GROWN; i++)
        g[i] = written(900u << 10, 2);
    struct tally_stats s = stats();
    /* Bound: peak 760 units + 256 of slack; live 380 + 6 * 57 = 722. */
    cr_assert_leq(s.cached_bytes, (uint64_t)(760 + 256 - 722) * SPAN_UNIT,
                  "cached %llu bytes beside the live runs (%llu before the takes)",
                  (unsigned long long)s.cached_bytes, (unsigned long long)cached);
    cr_assert_gt(s.purged_bytes, purged, "nothing was purged");
    for (int i = 1; i < N; i += 2)
        cr_assert_eq(v[i][(300u << 10) - 1], 1, "live block %d", i);
    for (int i = 0; i < GROWN; i++)
        free(g[i]);
    for (int i = 1; i < N; i += 2)
        free(v[i]);
}

Test(span, a_growing_block_moves_onto_warm_units_and_keeps_its_bytes)
{
    /* p (300 KiB) has a live block after it, so it cannot grow in place; a
     * freed, written 1 MiB run elsewhere takes it whole, and its new part
     * is resident already. */
    arm();
    char *warm = written(1000u << 10, 7);
    char *p = malloc(300u << 10), *wall = written(300u << 10, 8);
    cr_assert(p && wall);
    for (size_t i = 0; i < (300u << 10); i++)
        p[i] = (char)(i * 13);
    free(warm);
    char *q = realloc(p, 900u << 10);
    cr_assert_not_null(q);
    cr_assert_eq(q, warm, "the block did not move onto the warm run (%p, warm %p)", (void *)q,
                 (void *)warm);
    long f0 = minor_faults();
    memset(q + (300u << 10), 9, 600u << 10);
    long faults = minor_faults() - f0;
    cr_assert_lt(faults, 20, "the grown part faulted %ld times", faults);
    for (size_t i = 0; i < (300u << 10); i++)
        cr_assert_eq(q[i], (char)(i * 13), "byte %zu", i);
    free(q);
    free(wall);
}

Test(span, buffers_grown_twice_below_512k_stay_in_span_segments)
{
    /* Eight live buffers of 70 KB, each grown to 140 KB and then 280 KB,
     * their neighbours live, so each second growth moves. It moves onto
     * span units (those its neighbours vacated, or a segment's worth of
     * new ones), not into a mapping of its own apiece (SPAN_REGROW_MAX). */
    enum { N = 8 };
    char *b[N];
    for (int i = 0; i < N; i++)
        b[i] = written(70000, i + 1);
    for (int i = 0; i < N; i++) {
        b[i] = realloc(b[i], 140000);
        cr_assert_not_null(b[i]);
        memset(b[i] + 70000, i + 1, 70000);
    }
    struct tally_stats s0 = stats();
    for (int i = 0; i < N; i++) {
        b[i] = realloc(b[i], 280000);
        cr_assert_not_null(b[i]);
        memset(b[i] + 140000, i + 1, 140000);
    }
    struct tally_stats s1 = stats();
    cr_assert_leq(s1.mmap_calls - s0.mmap_calls, 2,
                  "%" PRIu64 " mmap calls for %d second growths",
                  (uint64_t)(s1.mmap_calls - s0.mmap_calls), N);
    for (int i = 0; i < N; i++) {
        for (size_t k = 0; k < 280000; k += 4096)
            cr_assert_eq(b[i][k], (char)(i + 1), "buffer %d, byte %zu", i, k);
        cr_assert_eq(b[i][279999], (char)(i + 1));
        free(b[i]);
    }
}

Test(span, a_span_block_grown_past_the_span_limit_keeps_its_bytes)
{
    char *p = malloc(700u << 10);
    for (size_t i = 0; i < (700u << 10); i++)
        p[i] = (char)(i * 7);
    p = realloc(p, 1800u << 10);    /* within SPAN_MAX */
    cr_assert_not_null(p);
    p = realloc(p, 5u << 20);       /* a mapping of its own */
    cr_assert_not_null(p);
    for (size_t i = 0; i < (700u << 10); i++)
        cr_assert_eq(p[i], (char)(i * 7), "byte %zu", i);
    memset(p, 1, 5u << 20);
    p = realloc(p, 200u << 10);     /* back down */
    cr_assert_eq(p[(200u << 10) - 1], 1);
    free(p);
}

/* mincore calls over N rounds of one block of `size` bytes, written to
 * `written`, allocated and freed. */
enum { REUSE_ROUNDS = 200 };
static long mincore_calls_reusing(size_t size, size_t written)
{
    long before = mincore_calls;
    for (int i = 0; i < REUSE_ROUNDS; i++) {
        char *p = malloc(size);
        cr_assert_not_null(p);
        memset(p, i, written);
        free(p);
    }
    return mincore_calls - before;
}

Test(span, a_dense_block_reused_in_a_loop_asks_the_kernel_nothing)
{
    /* Each unit keeps the pages its last measure found resident: taking
     * them again needs no mincore (it took one per malloc, 0.5-4 us). */
    arm();
    long calls = mincore_calls_reusing(300u << 10, 300u << 10);
    cr_assert_lt(calls, REUSE_ROUNDS / 10, "%ld mincore calls for %d mallocs", calls,
                 REUSE_ROUNDS);
}

Test(span, a_partly_written_block_reused_in_a_loop_asks_the_kernel_once)
{
    /* So a run taken from units resident in part needs none either (with a
     * mark for units resident whole alone, each take here asked). The
     * arming blocks write half of their runs, so no unit is whole. */
    arm_written(300u << 10);
    long calls = mincore_calls_reusing(300u << 10, 270u << 10);
    cr_assert_lt(calls, REUSE_ROUNDS / 10, "%ld mincore calls for %d mallocs", calls,
                 REUSE_ROUNDS);
}

Test(span, calloc_of_reused_units_is_zero)
{
    arm();
    for (size_t n = 150u << 10; n <= (1000u << 10); n += 110u << 10) {
        char *p = written(n, 0xee);
        free(p);
        unsigned char *z = calloc(1, n);
        cr_assert_not_null(z);
        for (size_t i = 0; i < n; i += 256)
            cr_assert_eq(z[i], 0, "calloc(%zu) byte %zu", n, i);
        cr_assert_eq(z[n - 1], 0);
        free(z);
    }
}

/* A block of n bytes written on three of its pages, then freed: where it was. */
static char *free_written_thrice(size_t n)
{
    char *p = malloc(n);
    cr_assert_not_null(p);
    p[0] = p[n / 2] = p[n - 1] = 7;
    free(p);
    return p;
}

/* z, a calloc of n bytes from such a block: no more than its written
 * pages are resident, and all of it reads as zero. */
static void assert_cleared_lightly(const unsigned char *z, size_t n)
{
    cr_assert_not_null(z);
    size_t resident = pages_in_ram(z, n);
    cr_assert_leq(resident, 6, "%zu pages of a %zu-byte block resident after calloc", resident, n);
    for (size_t i = 0; i < n; i += 509)
        cr_assert_eq(z[i], 0, "byte %zu", i);
    cr_assert_eq(z[n / 2], 0);
    cr_assert_eq(z[n - 1], 0);
}

/* calloc clears the pages of a reused block that hold data and leaves the
 * rest unfaulted: it cleared every unit a block had been handed (a unit
 * is dirty once handed out, written or not), so a run whose last owner
 * wrote three pages came back with all 128 resident. The arming blocks
 * are unwritten, so whichever run the calloc gets, only written pages
 * count. */
Test(span, calloc_of_a_reused_run_clears_only_the_pages_written)
{
    arm_written(0);
    size_t n = 512u << 10;
    free_written_thrice(n);
    unsigned char *z = calloc(1, n);
    assert_cleared_lightly(z, n);
    free(z);
}

/* The same for a medium block of 300 KiB (the size's gate shut by sparse
 * blocks, as below): its freed block comes back to the calloc. */
Test(span, calloc_of_a_reused_medium_block_clears_only_the_pages_written)
{
    size_t n = 300u << 10;
    for (int i = 0; i < 64; i++) {
        char *p = malloc(n);
        cr_assert_not_null(p);
        p[0] = 1;
        free(p);
    }
    uint64_t large0 = stats().large_count;      /* live blocks: checked while p is */
    char *p = malloc(n);
    cr_assert_not_null(p);
    cr_assert_eq(stats().large_count, large0, "300 KiB is still a span block");
    p[0] = p[n / 2] = p[n - 1] = 7;
    free(p);
    unsigned char *z = calloc(1, n);
    cr_assert_eq(z, (unsigned char *)p, "the medium block did not come back (%p, was %p)",
                 (void *)z, (void *)p);
    assert_cleared_lightly(z, n);
    free(z);
}

Test(span, sparsely_written_blocks_shut_their_sizes_gate)
{
    /* It starts open: a 300 KiB request is a large (span) block. Blocks
     * of that size written on their first page only shut it: the same
     * request is a medium block again, and so is the next. (A block
     * written whole first would leave its run resident for the next ones,
     * whose frees then say nothing of how they write.) */
    uint64_t large0 = stats().large_count;
    char *d = malloc(300u << 10);
    cr_assert_not_null(d);
    cr_assert_eq(stats().large_count, large0 + 1, "300 KiB was no span block at first");
    free(d);
    for (int i = 0; i < 64; i++) {
        char *p = malloc(300u << 10);
        cr_assert_not_null(p);
        p[0] = 1;
        free(p);
    }
    char *m = written(300u << 10, 2);
    uint64_t large1 = stats().large_count;
    cr_assert_eq(large1, large0, "300 KiB is still a span block after sparse ones (%llu live, %llu before)",
                 (unsigned long long)large1, (unsigned long long)large0);
    free(m);
}

Test(span, sparse_blocks_of_one_size_leave_other_written_sizes_on_spans)
{
    /* git log -p: one reused buffer written to a third of its run shut
     * the span path for the dozen other sizes it writes densely, and
     * each took a medium class's pages of its own. Sizes already seen
     * written keep their own gate; a size never seen follows the
     * program's (mstress: blocks of a few dozen sizes, all sparse).
     * First every free unit goes back, so that the two written blocks
     * take fresh units, whose frees are noted. */
    malloc_trim(0);
    free(written(300u << 10, 3));
    free(written(100u << 10, 4));
    uint64_t large0 = stats().large_count;
    for (int i = 0; i < 64; i++) {
        char *p = malloc(700u << 10);
        cr_assert_not_null(p);
        p[0] = 1;
        free(p);
    }
    char *d = written(300u << 10, 5), *e = written(100u << 10, 6);
    cr_assert_eq(stats().large_count, large0 + 2,
                 "300 and 100 KiB are no span blocks after sparse 700 KiB ones (%llu live, %llu before)",
                 (unsigned long long)stats().large_count, (unsigned long long)large0);
    free(d);
    free(e);
    char *n = written(200u << 10, 7);
    cr_assert_eq(stats().large_count, large0, "a size never seen took the span path while the program's gate is shut");
    free(n);
}

Test(span, malloc_trim_gives_free_span_segments_back)
{
    enum { N = 16 };
    char *v[N];
    arm();
    for (int i = 0; i < N; i++)
        v[i] = written(800u << 10, i);
    for (int i = 0; i < N; i++)
        free(v[i]);
    uint64_t before = stats().mapped_bytes;
    long rss = rss_kib();
    malloc_trim(0);
    cr_assert_leq(stats().mapped_bytes + (8u << 20), before, "span segments stayed mapped");
    cr_assert_lt(rss_kib(), rss - 8 * 1024, "their pages stayed resident");
    /* Unmapped, not kept in the heaps' segment cache: malloc_trim retires
     * them before it releases that cache. Not every one of them: another
     * live span block (a 64 KiB+ buffer of the test harness's, say) keeps
     * its segment mapped, so any of the blocks' segments will do. */
    int unmapped = 0;
    for (int i = 0; i < N; i++) {
        unsigned char vec;
        void *page = (void *)((uintptr_t)v[i] & ~(uintptr_t)4095);
        unmapped += mincore(page, 4096, &vec) == -1;
    }
    cr_assert_gt(unmapped, 0, "every block's segment is still mapped");
}

/* Resident bytes of the n blocks of `size` at v[] (freed: their segments
 * stay mapped, so mincore reads them). */
static size_t resident_of(char **v, int n, size_t size)
{
    size_t pages = 0;
    for (int i = 0; i < n; i++) {
        unsigned char vec[(800u << 10) / 4096];
        char *start = (char *)((uintptr_t)v[i] & ~(uintptr_t)4095);
        size_t len = (size_t)(v[i] + size - start) / 4096 * 4096;
        cr_assert_leq(len / 4096, sizeof vec);
        cr_assert_eq(mincore(start, len, vec), 0, "block %d's segment was unmapped", i);
        for (size_t k = 0; k < len / 4096; k++)
            pages += vec[k] & 1;
    }
    return pages * 4096;
}

/* A program that frees a batch of span blocks and moves on to other work
 * (CPython's json.dumps: large_cache.h) gets all but a warm reserve back
 * once they stayed free for purge_delay, at its next large request, not
 * a second later. */
Test(span, freed_runs_beyond_the_warm_reserve_go_back_after_purge_delay)
{
    enum { N = 24 };
    const size_t size = 800u << 10;
    char *v[N];
    cr_assert_eq(tally_option_set("purge_delay", "50"), 0);
    arm();
    for (int i = 0; i < N; i++)
        v[i] = written(size, i + 1);
    for (int i = 0; i < N; i++)
        free(v[i]);
    size_t before = resident_of(v, N, size);
    cr_assert_geq(before, (size_t)N * size / 2, "only %zu bytes resident after the free", before);
    sleep_ms(150);
    free(written(2u << 20, 7));     /* a mapping: the large path */
    size_t after = resident_of(v, N, size);
    cr_assert_leq(after, LARGE_WARM_BYTES + 2 * SPAN_UNIT,
                  "%zu of %zu bytes still resident 150 ms after the free", after, before);
}

/* The statistics show the freed runs kept for reuse: what a process
 * holds beyond its live blocks until they expire or malloc_trim. */
Test(span, the_statistics_count_freed_runs_kept_for_reuse)
{
    enum { N = 8 };
    const size_t size = 800u << 10;
    char *v[N];
    arm();
    for (int i = 0; i < N; i++)
        v[i] = written(size, i + 1);
    for (int i = 0; i < N; i++)
        free(v[i]);
    struct tally_stats s = stats();
    cr_assert_geq(s.cached_bytes, (N - 1) * size, "cached %" PRIu64 " bytes", s.cached_bytes);
    cr_assert_geq(s.resident_bytes, s.cached_bytes);
    malloc_trim(0);
    cr_assert_eq(stats().cached_bytes, 0, "cached bytes left after malloc_trim");
}

static void *churn_spans(void *arg)
{
    volatile bool *stop = arg;
    while (!*stop) {
        char *p = malloc(400u << 10);
        if (p) {
            p[0] = 1;
            free(p);
        }
    }
    return NULL;
}

static void child_takes_a_span(void *arg)
{
    (void)arg;
    char *p = malloc(500u << 10);
    if (!p)
        abort();
    memset(p, 3, 500u << 10);
    free(p);
}

Test(span, a_child_forked_beside_a_thread_using_spans_can_use_them)
{
    volatile bool stop = false;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, churn_spans, (void *)&stop), 0);
    for (int i = 0; i < 20; i++) {
        struct child_result r = run_in_child(child_takes_a_span, NULL);
        cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "child %d failed: %s", i,
                  r.err);
    }
    stop = true;
    pthread_join(t, NULL);
}

/* Replaces 64 live blocks of 32-200 KiB at random, each filled with a
 * byte of its own and checked before it goes. */
static void *replace_checked(void *arg)
{
    uint64_t x = (uintptr_t)arg * 0x9e3779b97f4a7c15u + 1;
    enum { LIVE = 64 };
    unsigned char *v[LIVE] = { 0 };
    size_t n[LIVE] = { 0 };
    for (int i = 0; i < 6000; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        unsigned j = (unsigned)(x % LIVE);
        if (v[j]) {
            unsigned char b = (unsigned char)(j + 1);
            if (v[j][0] != b || v[j][n[j] / 2] != b || v[j][n[j] - 1] != b)
                return (void *)1;       /* another block took its run */
            free(v[j]);
        }
        n[j] = (32u << 10) + (size_t)((x >> 16) % (168u << 10));
        v[j] = malloc(n[j]);
        if (!v[j])
            return (void *)1;
        memset(v[j], j + 1, n[j]);
    }
    for (unsigned j = 0; j < LIVE; j++)
        free(v[j]);
    return NULL;
}

Test(span, threads_that_wait_for_the_lock_keep_runs_and_give_them_back_at_exit)
{
    /* Four threads on span blocks wait for the span lock, so each keeps
     * its last freed runs (span_keep.h): every block keeps its bytes, and
     * once the threads are gone and malloc_trim ran, no kept run holds a
     * segment mapped. */
    uint64_t before = stats().mapped_bytes;
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, replace_checked, (void *)(i + 1)), 0);
    for (int i = 0; i < 4; i++) {
        void *bad;
        pthread_join(t[i], &bad);
        cr_assert_null(bad, "thread %d found a block overwritten", i);
    }
    malloc_trim(0);
    uint64_t after = stats().mapped_bytes;
    cr_assert_leq(after, before + (8u << 20), "mapped %llu -> %llu KiB after the threads left",
                  (unsigned long long)before >> 10, (unsigned long long)after >> 10);
}

struct trim_churn {
    volatile bool stop;
};

static void *trim_loop(void *arg)
{
    struct trim_churn *c = arg;
    while (!c->stop)
        malloc_trim(0);
    return NULL;
}

static void *replace_until_stopped(void *arg)
{
    struct trim_churn *c = arg;
    char *v[16] = { 0 };
    for (unsigned i = 0; !c->stop; i++) {
        unsigned j = i % 16;
        free(v[j]);
        v[j] = malloc((40u << 10) + (i % 7) * (16u << 10));
        if (v[j])
            v[j][0] = 1;
    }
    for (unsigned j = 0; j < 16; j++)
        free(v[j]);
    return NULL;
}

static void child_exits(void *arg) { (void)arg; }

Test(span, fork_beside_trims_of_kept_runs_does_not_deadlock, .timeout = 60)
{
    /* Threads on span blocks wait for the span lock, so they keep runs;
     * malloc_trim gives back the other threads' kept runs, which takes the
     * span lock. Done under the heap table's lock, it deadlocked against
     * a fork, whose prepare handler takes the span lock first. */
    struct trim_churn c = { false };
    pthread_t t[3];
    cr_assert_eq(pthread_create(&t[0], NULL, trim_loop, &c), 0);
    cr_assert_eq(pthread_create(&t[1], NULL, replace_until_stopped, &c), 0);
    cr_assert_eq(pthread_create(&t[2], NULL, replace_until_stopped, &c), 0);
    for (int i = 0; i < 300; i++) {
        struct child_result r = run_in_child(child_exits, NULL);
        cr_assert(WIFEXITED(r.status), "child %d did not exit: %s", i, r.err);
    }
    c.stop = true;
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
}

struct idle_keeper {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool leave;
};

/* Replaces 8 blocks of 96 KiB, then frees them and waits, alive. */
static void *keep_then_idle(void *arg)
{
    struct idle_keeper *k = arg;
    char *v[8] = { 0 };
    for (unsigned i = 0; i < 4000; i++) {
        unsigned j = i % 8;
        free(v[j]);
        v[j] = malloc(96u << 10);
        if (v[j])
            memset(v[j], 1, 96u << 10);
    }
    for (unsigned j = 0; j < 8; j++)
        free(v[j]);
    pthread_mutex_lock(&k->lock);
    while (!k->leave)
        pthread_cond_wait(&k->cond, &k->lock);
    pthread_mutex_unlock(&k->lock);
    return NULL;
}

Test(span, runs_kept_by_a_thread_that_went_idle_go_back, .timeout = 30)
{
    /* Two threads whose requests are all large wait for the span lock, so
     * they keep their freed runs; then they wait, alive. Such a thread
     * never sweeps its heap: the other threads' sweeps give its runs back,
     * and once unused for a second they are purged like any free units
     * (before, they stayed live and resident for as long as it lived). */
    struct idle_keeper k = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false };
    cr_assert_eq(tally_option_set("purge_delay", "100"), 0);
    long before = rss_kib();
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, keep_then_idle, &k), 0);
    sleep_ms(300);              /* they are done in a few ms */
    long after = 0;
    for (int round = 0; round < 60; round++) {
        for (int i = 0; i < 50; i++)
            free(malloc(100 + (size_t)i));      /* this thread sweeps */
        sleep_ms(50);
        after = rss_kib();
        if (after < before + 512)
            break;
    }
    pthread_mutex_lock(&k.lock);
    k.leave = true;
    pthread_cond_broadcast(&k.cond);
    pthread_mutex_unlock(&k.lock);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    cr_assert_lt(after, before + 512, "RSS %ld -> %ld KiB with the threads idle", before, after);
}

static void *free_a_written_run(void *arg)
{
    char **p = arg;
    *p = written(100u << 10, 7);
    free(*p);
    return NULL;
}

Test(span, a_thread_takes_runs_from_its_own_arena)
{
    /* Each heap's thread takes span runs from its heap's arena (span.c):
     * the run another thread freed a moment ago stays in that thread's
     * arena (a thread with no heap, as this one, uses arena 0; this
     * thread's heap, the process's first or so, another), where a single
     * arena handed it to the next request of its size first. */
    char *mine = written(100u << 10, 1);       /* this thread's heap and arena */
    free(mine);
    char *theirs = NULL;
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, free_a_written_run, &theirs), 0);
    pthread_join(t, NULL);
    char *p = malloc(100u << 10);
    cr_assert_neq(p, theirs, "this thread took the run the other thread freed");
    cr_assert_eq(p, mine, "this thread did not take its own freed run back");
    free(p);
}

Test(span, blocks_above_32_kib_are_span_blocks_while_the_gate_is_open)
{
    /* Above SPAN_MIN (32 KiB), where a medium class's freed block served
     * only its class: bufregrow's first sizes of 32-64 KiB peaked at 170
     * MiB as class blocks and at 156 as span blocks (glibc 150). */
    uint64_t before = stats().large_count;
    char *p = written(40000, 3), *q = written(33000, 4);
    cr_assert_eq(stats().large_count, before + 2, "40,000 and 33,000 B blocks are no span blocks");
    free(p);
    free(q);
    char *m = written(30000, 5);    /* below it: a class block */
    cr_assert_eq(stats().large_count, before, "a 30,000 B block is a span block");
    free(m);
}
