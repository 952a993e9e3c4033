/*
 * test_large.c - blocks above the mmap threshold: realloc moves pages with
 * mremap instead of copying, and shrinking gives pages back.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <inttypes.h>
#include <malloc.h>
#include "tally.h"

static struct tally_stats stats(void)
{
    struct tally_stats s = { .size = sizeof s };
    tally_stats_get(&s);
    return s;
}

/* Over the large cache's default limit (256 MiB): never kept. */
#define TOO_BIG_TO_CACHE (264u << 20)

static void arm_cache(void);

Test(large, growing_a_written_64MiB_block_does_not_copy_it)
{
    size_t n = 64u << 20;
    unsigned char *p = malloc(n);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = (unsigned char)(i >> 12);
    struct tally_stats before = stats();
    long faults = minor_faults();
    p = realloc(p, 2 * n);
    long copied_faults = minor_faults() - faults;
    struct tally_stats after = stats();
    cr_assert_not_null(p);
    /* A copy would fault in all 16384 pages of the new block. */
    cr_assert_lt(copied_faults, 256, "realloc took %ld page faults", copied_faults);
    cr_assert_gt(after.mremap_calls, before.mremap_calls);
    for (size_t i = 0; i < n; i += 4096)
        cr_assert_eq(p[i], (unsigned char)(i >> 12), "byte at %zu", i);
    free(p);
}

Test(large, untouched_growth_1_to_64MiB_faults_almost_nothing)
{
    long faults = minor_faults();
    void *p = NULL;
    for (size_t mib = 1; mib <= 64; mib++) {
        p = realloc(p, mib << 20);
        cr_assert_not_null(p);
    }
    free(p);
    long taken = minor_faults() - faults;
    cr_assert_lt(taken, 200, "growth took %ld page faults", taken);
}

Test(large, a_block_grown_again_into_its_cached_last_round_faults_little)
{
    /* realloc-M's round: a buffer grown 1 MiB a step to 64 MiB, written,
     * freed, and grown again. The freed 64 MiB stays cached (half the
     * limit unmapped it), and the next round's steps grow into it,
     * doubling, so its cuts last (one cut a step ran out at 16 MiB and
     * moved into fresh pages): 16,384 faults a round before. */
    arm_cache();
    long faults = 0;
    for (int round = 0; round < 2; round++) {
        long f0 = minor_faults();
        char *p = NULL;
        size_t have = 0;
        for (size_t mib = 1; mib <= 64; mib++) {
            p = realloc(p, mib << 20);
            cr_assert_not_null(p);
            memset(p + have, (int)mib, (mib << 20) - have);
            have = mib << 20;
        }
        cr_assert_eq(p[0], 1);
        cr_assert_eq(p[have - 1], 64);
        free(p);
        faults = minor_faults() - f0;
    }
    cr_assert_lt(faults, 1024, "the second round took %ld faults", faults);
}

Test(large, a_growing_block_stays_one_mapping)
{
    /* Most steps grow in place (one mremap); a step that cannot moves the
     * block whole (a second mremap). A move that left the block split over
     * two kernel mappings would make every later step fail in place and
     * move: 2 calls a step (123 measured, against 68). */
    void *p = malloc(1u << 20);
    struct tally_stats before = stats();
    for (size_t mib = 2; mib <= 64; mib++) {
        p = realloc(p, mib << 20);
        cr_assert_not_null(p);
    }
    struct tally_stats after = stats();
    uint64_t calls = after.mremap_calls - before.mremap_calls;
    cr_assert_lt(calls, 63 + 32, "63 growth steps took %llu mremap calls",
                  (unsigned long long)calls);
    free(p);
}

Test(large, shrinking_gives_pages_back)
{
    size_t n = 128u << 20;
    unsigned char *p = malloc(n);
    memset(p, 1, n);
    long rss_full = rss_kib();
    p = realloc(p, 8u << 20);
    long rss_small = rss_kib();
    cr_assert_lt(rss_small, rss_full - 100 * 1024, "RSS %ld -> %ld KiB", rss_full, rss_small);
    cr_assert_eq(p[(8u << 20) - 1], 1);
    free(p);
}

Test(large, free_of_a_block_too_big_to_cache_unmaps_at_once)
{
    arm_cache();
    size_t n = TOO_BIG_TO_CACHE;
    unsigned char *p = malloc(n);
    memset(p, 1, n);
    long rss_full = rss_kib();
    free(p);
    cr_assert_lt(rss_kib(), rss_full - 90 * 1024);
}

/* Under the default limit a freed block stays mapped for the next
 * request: malloc-large's 5-32 MiB blocks join into cached entries of
 * 50 MiB and more, and a 128 MiB limit evicted them, so the next blocks
 * faulted in again (docs/benchmarks.md, the table of changes). */
Test(large, the_default_cache_keeps_a_200MiB_block)
{
    arm_cache();
    size_t n = 200u << 20;
    char *p = malloc(n);
    cr_assert_not_null(p);
    p[0] = 1;
    uint64_t before = stats().mapped_bytes;
    free(p);
    uint64_t after = stats().mapped_bytes;
    cr_assert_geq(after + (1u << 20), before, "the freed block was unmapped (%llu -> %llu bytes)",
                  (unsigned long long)before, (unsigned long long)after);
    char *q = malloc(n);
    cr_assert_eq(q, p, "the next request of its size does not reuse it");
    free(q);
}

Test(large, calloc_of_large_is_zero_and_usable_size_is_mapped_size)
{
    size_t n = (3u << 20) + 5;
    unsigned char *p = calloc(1, n);
    size_t u = malloc_usable_size(p);
    cr_assert_geq(u, n);
    cr_assert_lt(u, n + 8192);
    for (size_t i = 0; i < u; i += 1024)
        cr_assert_eq(p[i], 0);
    memset(p, 2, u);
    free(p);
}

Test(large, a_block_above_a_segment_maps_whole_segments)
{
    /* 7 MiB and 15 MiB + 1 end on a 4 MiB boundary: fresh mappings start
     * aligned without an over-map, and freed neighbours abut in the cache.
     * 3 MiB (below a segment) and 5 MiB (a quarter short of 8) keep their
     * own size: rounding them would charge up to twice as much to the
     * commit limit. Each comes before the cache holds a segment to give. */
    size_t seg = 4u << 20;
    size_t whole[] = { 7u << 20, (15u << 20) + 1 }, exact[] = { 3u << 20, 5u << 20 };
    for (unsigned i = 0; i < 2; i++) {
        char *q = malloc(exact[i]);
        cr_assert_not_null(q);
        cr_assert_lt(malloc_usable_size(q), exact[i] + 8192, "%zu bytes were rounded up",
                     exact[i]);
        free(q);
    }
    for (unsigned i = 0; i < 2; i++) {
        char *p = malloc(whole[i]);
        cr_assert_not_null(p);
        size_t u = malloc_usable_size(p);
        cr_assert_geq(u, whole[i]);
        cr_assert_eq(((uintptr_t)p + u) % seg, 0, "a %zu-byte block ends at %p + %zu",
                     whole[i], (void *)p, u);
        memset(p, 1, whole[i]);
        free(p);
    }
}

/* The cache keeps freed blocks only once a large request has followed a
 * large free. This shows it one with a block too big to keep (over the
 * large_cache limit), which goes back to the kernel either way. */
static void arm_cache(void)
{
    free(malloc(TOO_BIG_TO_CACHE));
    free(malloc(TOO_BIG_TO_CACHE));
}

/* A block of n bytes, written and freed: where it was. */
static char *touch_and_free(size_t n)
{
    char *p = malloc(n);
    cr_assert_not_null(p);
    memset(p, 1, n);
    free(p);
    return p;
}

/* Leaves one touched block of n bytes in the large cache. */
static void cache_one(size_t n)
{
    arm_cache();
    touch_and_free(n);
}

Test(large, a_freed_large_block_is_reused_warm)
{
    size_t n = 8u << 20;
    cache_one(n);
    long faults = minor_faults();
    char *p = malloc(n);
    memset(p, 2, n);
    long taken = minor_faults() - faults;
    cr_assert_lt(taken, 64, "reusing a cached block took %ld faults", taken);
    free(p);
}

/* Leaves two touched 6 MiB blocks in the large cache: neither alone
 * covers an 11 MiB request, so that request glues them. */
#define GLUE_PIECE (6u << 20)
#define GLUE_BIG   (11u << 20)

static void cache_two_pieces(void)
{
    arm_cache();
    char *p = malloc(GLUE_PIECE), *q = malloc(GLUE_PIECE);
    memset(p, 1, GLUE_PIECE);
    memset(q, 2, GLUE_PIECE);
    free(p);
    free(q);
}

Test(large, cached_blocks_are_glued_for_a_bigger_request)
{
    /* Neither cached block is big enough alone; their pages move into one
     * mapping instead of the request faulting most of its pages in. */
    size_t big = GLUE_BIG;
    cache_two_pieces();
    long faults = minor_faults();
    char *r = malloc(big);
    memset(r, 3, big);
    long taken = minor_faults() - faults;
    cr_assert_lt(taken, 64, "an 11 MiB block from two cached 6 MiB ones took %ld faults", taken);
    cr_assert_eq(r[0], 3);
    cr_assert_eq(r[big - 1], 3);
    free(r);
}

Test(large, a_failed_glue_still_gives_a_whole_block)
{
    /* The n-th kernel call of the glue fails: the reservation, then each
     * move. The request is still served, whole and writable. */
    size_t big = GLUE_BIG;
    for (int fail_at = 1; fail_at <= 4; fail_at++) {
        cache_two_pieces();
        char num[8];
        snprintf(num, sizeof num, "%d", fail_at);
        cr_assert_eq(tally_option_set("test_fail_mmap", num), 0);
        char *r = malloc(big);
        cr_assert_eq(tally_option_set("test_fail_mmap", "0"), 0);
        cr_assert_not_null(r, "fail_at=%d", fail_at);
        memset(r, 3, big);
        cr_assert_eq(r[0] + r[big / 2] + r[big - 1], 9);
        free(r);
        malloc_trim(0);
    }
}

Test(large, a_glued_block_grows_with_realloc)
{
    /* The glued block spans the kernel mappings of both cached blocks,
     * which mremap cannot grow as one: realloc must still succeed, with
     * the contents, without copying them. */
    size_t big = GLUE_BIG;
    cache_two_pieces();
    char *r = malloc(big);
    memset(r, 3, big);
    r[big - 1] = 4;
    long faults = minor_faults();
    for (size_t grow = 16u << 20; grow <= (40u << 20); grow += 8u << 20) {
        r = realloc(r, grow);
        cr_assert_not_null(r, "realloc of a glued block to %zu bytes", grow);
        cr_assert_eq(r[0], 3);
        cr_assert_eq(r[big / 2], 3);
        cr_assert_eq(r[big - 1], 4);
    }
    /* Page tables moved, not bytes copied: a copy faults in 2,816 pages. */
    long taken = minor_faults() - faults;
    cr_assert_lt(taken, 64, "growing a glued block took %ld faults", taken);
    free(r);
}

/* The kernel mappings (lines of /proc/self/maps) that overlap [p, p + n). */
static int kernel_maps(const void *p, size_t n)
{
    FILE *f = fopen("/proc/self/maps", "r");
    cr_assert_not_null(f);
    char line[512];
    int count = 0;
    uintptr_t a = (uintptr_t)p, b = a + n;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo < b && hi > a)
            count++;
    }
    fclose(f);
    return count;
}

/* Grows a block by gluing it to a cached 1 MiB block, `rounds` times:
 * each glue adds the other block's mapping, so only the bound on mappings
 * per block (large_maps.h) keeps the count down. Returns the block, of
 * *size bytes, every byte written. */
static char *glue_repeatedly(int rounds, size_t *size, int *most_maps)
{
    size_t one = 1u << 20, cur = one;
    arm_cache();
    char *g = malloc(cur);
    memset(g, 1, cur);
    *most_maps = 0;
    for (int i = 0; i < rounds; i++) {
        char *piece = malloc(one);
        memset(piece, 2, one);
        free(g);
        free(piece);
        cur += one;
        g = malloc(cur);
        cr_assert_not_null(g);
        memset(g, 3, cur);
        int maps = kernel_maps(g, cur);
        if (maps > *most_maps)
            *most_maps = maps;
    }
    *size = cur;
    return g;
}

Test(large, a_block_spans_a_bounded_number_of_kernel_mappings)
{
    /* Without the bound the 40th glue left a block over 40 mappings. */
    size_t size;
    int most;
    char *g = glue_repeatedly(40, &size, &most);
    cr_assert_leq(most, 16, "a glued block spans %d kernel mappings", most);
    cr_assert_eq(g[0] + g[size - 1], 6);
    free(g);
}

Test(large, a_glued_block_grows_its_last_mapping_in_place)
{
    /* Moving the pieces would add one mapping per growth (and move all of
     * them); growing the last one in place adds none. */
    size_t size;
    int most;
    char *g = glue_repeatedly(6, &size, &most);
    int before = kernel_maps(g, size);
    cr_assert_gt(before, 1, "the block is glued (%d mappings)", before);
    char *start = g;
    for (int i = 0; i < 8; i++) {
        size += 1u << 20;
        g = realloc(g, size);
        cr_assert_not_null(g);
        g[size - 1] = 4;
    }
    cr_assert_eq(g[0], 3);
    int after = kernel_maps(g, size);
    cr_assert_leq(after, before + 1, "8 growths: %d -> %d mappings (moved: %d)", before,
                  after, g != start);
    free(g);
}

Test(large, a_split_tail_serves_the_next_request_warm)
{
    cache_one(24u << 20);
    long faults = minor_faults();
    char *a = malloc(5u << 20), *b = malloc(15u << 20);
    memset(a, 2, 5u << 20);
    memset(b, 3, 15u << 20);
    long taken = minor_faults() - faults;
    cr_assert_lt(taken, 64, "5 + 15 MiB out of a cached 24 MiB block took %ld faults", taken);
    cr_assert_eq(a[(5u << 20) - 1], 2);
    cr_assert_eq(b[0], 3);
    free(a);
    free(b);
}

Test(large, a_freed_block_joins_its_cached_tail)
{
    /* A 5 MiB block cut from a cached 24 MiB one leaves the 16 MiB tail
     * cached; freed, the block is joined with it again, so a 20 MiB
     * request gets the same mapping back, its pages where they were. (Kept
     * apart, neither covered 20 MiB, and both moved into a fresh mapping.) */
    size_t whole = 24u << 20, part = 5u << 20, big = 20u << 20;
    arm_cache();
    char *p = malloc(whole);
    memset(p, 1, whole);
    free(p);
    char *a = malloc(part);
    cr_assert_eq(a, p, "the 5 MiB block is the cached block's head");
    memset(a, 2, part);
    free(a);
    long faults = minor_faults();
    char *b = malloc(big);
    memset(b, 3, big);
    long taken = minor_faults() - faults;
    cr_assert_eq(b, p, "the 20 MiB block is the joined mapping (got %p, cached %p)",
                 (void *)b, (void *)p);
    cr_assert_lt(taken, 64, "20 MiB out of the joined 24 MiB took %ld faults", taken);
    free(b);
}

/* A buffer grown by doubling to 8 MiB, written as it grows and freed,
 * round after round (a string builder, a file read whole): each round's
 * large steps take the last round's pages from the cache. The cache hands
 * the 1 MiB step a whole 4 MiB segment of them; the 2 MiB step must stay
 * in it (it shrank to 2 MiB, giving back the pages the growth was about
 * to write), and the 4 MiB step must take the cached rest right after it
 * (it moved past it into fresh pages). Before, each round took about
 * 1,550 faults and the cache filled up with the pieces: 97 MiB of peak
 * RSS over 200 rounds, against glibc's 10. */
static long doubling_round(size_t top)
{
    long faults = minor_faults();
    char *p = NULL;
    size_t cap = 0, len = 0;
    while (len < top) {
        if (len + 4096 > cap) {
            cap = cap ? 2 * cap : 4096;
            p = realloc(p, cap);
            cr_assert_not_null(p);
        }
        memset(p + len, (int)(len >> 12), 4096);
        len += 4096;
    }
    for (size_t off = 0; off < top; off += 4096)
        cr_assert_eq(p[off], (char)(off >> 12), "byte at %zu", off);
    free(p);
    return minor_faults() - faults;
}

Test(large, a_buffer_grown_by_doubling_reuses_its_last_rounds_pages)
{
    arm_cache();
    doubling_round(8u << 20);
    doubling_round(8u << 20);
    long taken = 0;
    for (int r = 0; r < 4; r++)
        taken += doubling_round(8u << 20);
    cr_assert_lt(taken, 4 * 100, "4 rounds took %ld faults (2,048 pages a round)", taken);
}

Test(large, a_growing_realloc_stays_in_a_bigger_mapping)
{
    /* 1 MiB out of a cached 8 MiB block gets a 4 MiB mapping; growing to
     * 3 MiB neither moves nor calls the kernel. Shrinking below what was
     * asked gives back what it can. */
    cache_one(8u << 20);
    char *p = malloc(1u << 20);
    cr_assert_gt(malloc_usable_size(p), 3u << 20, "the cache's whole segment");
    struct tally_stats before = stats();
    char *q = realloc(p, 3u << 20);
    struct tally_stats after = stats();
    cr_assert_eq(q, p);
    cr_assert_eq(after.mremap_calls, before.mremap_calls, "a growth within the mapping");
    q = realloc(q, 1u << 20);
    cr_assert_lt(malloc_usable_size(q), 2u << 20, "a shrink gives the rest back");
    free(q);
}

/* A block that realloc grows twice goes to a mapping of its own, below
 * the mmap threshold too, so later growth moves page tables or stays put
 * instead of copying: a medium block of 256 KiB or more at its first
 * growth (raw.h, RAW_GROWN_LARGE), a span block at a later one that
 * reaches SPAN_REGROW_MAX (large.c, LARGE_GROWN). With the block left in a medium class, the 2 MiB step
 * copied it into a new mapping: another pointer and no mremap. */
Test(large, a_block_grown_twice_by_realloc_moves_to_its_own_mapping)
{
    size_t a = 300u << 10, b = 400u << 10, c = 2u << 20;
    unsigned char *p = malloc(a);
    for (size_t i = 0; i < a; i++)
        p[i] = (unsigned char)(i * 7);
    unsigned char *q = realloc(p, b);
    cr_assert_not_null(q);
    cr_assert_geq(malloc_usable_size(q), b);
    /* The second growth, below the threshold but to SPAN_REGROW_MAX or
     * more: a mapping from here on (before, raw realloc moved a large
     * block of up to 512 KiB into a new block: a copy, and with the rule
     * above another mapping). */
    unsigned char *m = realloc(q, 520u << 10);
    cr_assert_not_null(m);
    q = m;
    struct tally_stats before = stats();
    unsigned char *r = realloc(q, c);
    struct tally_stats after = stats();
    cr_assert_not_null(r);
    cr_assert(r == q || after.mremap_calls > before.mremap_calls,
              "the 2 MiB step copied the block (%p -> %p, no mremap)", (void *)q, (void *)r);
    for (size_t i = 0; i < a; i++)
        cr_assert_eq(r[i], (unsigned char)(i * 7), "byte %zu", i);
    free(r);
}

Test(large, the_cache_keeps_120_blocks_below_a_segment)
{
    /* 124 freed 1 MiB blocks, each in a segment-aligned range of its
     * own (so none glue into one entry): the cache keeps 120 of them
     * mapped (LARGE_CACHE_SMALL_SLOTS; 12 before, when a server cycling
     * 100 such buffers faulted 88 of them in again every round) and
     * unmaps the rest. 120.5 MiB, under the 256 MiB byte limit. */
    enum { N = 124, KEPT = 120 };
    size_t n = 1u << 20;    /* a mapping each: smaller ones are span blocks (span.h) */
    static char *v[N];
    arm_cache();
    uint64_t before = stats().mapped_bytes;
    for (int i = 0; i < N; i++) {
        v[i] = malloc(n);
        cr_assert_not_null(v[i]);
        v[i][0] = (char)i;
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
    uint64_t kept = stats().mapped_bytes - before;
    cr_assert_geq(kept, KEPT * n, "the cache keeps %d blocks (%llu bytes still mapped)", KEPT,
                  (unsigned long long)kept);
    cr_assert_lt(kept, (KEPT + 1) * n, "the cache keeps only %d blocks (%llu bytes still mapped)",
                 KEPT, (unsigned long long)kept);
}

Test(large, cached_and_live_blocks_stay_within_the_live_peak)
{
    /* Four 1 MiB blocks live at once, three freed into the cache; the
     * fourth then grows to 3 MiB. Cached plus live may not pass the four
     * blocks' peak, so two of the three entries go: what stays mapped
     * grows by less than the 2 MiB the block took (by 2 MiB when the
     * cache kept all three). */
    size_t n = 1u << 20;
    char *v[4];
    arm_cache();
    for (int i = 0; i < 4; i++) {
        v[i] = malloc(n);
        cr_assert_not_null(v[i]);
        memset(v[i], i + 1, n);
    }
    for (int i = 1; i < 4; i++)
        free(v[i]);
    uint64_t before = stats().mapped_bytes;
    char *g = realloc(v[0], 3 * n);
    cr_assert_not_null(g);
    memset(g + n, 9, 2 * n);
    uint64_t after = stats().mapped_bytes;
    cr_assert_eq(g[n - 1], 1, "the grown block kept its bytes");
    cr_assert_lt(after, before + n, "cache and live blocks above their peak (%llu -> %llu bytes)",
                 (unsigned long long)before, (unsigned long long)after);
    /* One entry (1 MiB of the peak's room) stays: a block that size
     * comes back warm from it. */
    struct tally_stats s0 = stats();
    char *w = malloc(n);
    cr_assert_not_null(w);
    cr_assert_eq(stats().mmap_calls, s0.mmap_calls, "the kept entry served the request");
    free(w);
    free(g);
}

Test(large, a_cached_block_over_twice_the_request_is_left_for_a_better_fit)
{
    /* A 1.1 MiB request does not take a cached 3 MiB block (its resident
     * pages would sit unused in the smaller one); a 1.6 MiB one does.
     * (Below 1 MiB a block is a span run: span.h.) */
    size_t big = 3u << 20;
    arm_cache();
    char *b = touch_and_free(big);
    struct tally_stats s0 = stats();
    char *p = malloc(1100u << 10);
    cr_assert_not_null(p);
    cr_assert_neq(p, b, "a 1.1 MiB request took the 3 MiB block");
    cr_assert_gt(stats().mmap_calls, s0.mmap_calls, "a 1.1 MiB request came from the cache");
    free(p);
    touch_and_free(big);           /* a 3 MiB block cached again */
    struct tally_stats s1 = stats();
    char *q = malloc(1600u << 10);
    cr_assert_not_null(q);
    cr_assert_eq(stats().mmap_calls, s1.mmap_calls, "a 1.6 MiB request mapped afresh");
    free(q);
}

/* A live 1.2 MiB block grown to 2.5 MiB while a written 3 MiB block
 * waits in the cache; the block's bytes are i * 13. Returns the grown
 * block, which must have landed on the cached one, and *left is where the
 * block was. (Below 1 MiB a block is a span run: span.h.) */
#define ONTO_CACHED (3u << 20)
#define ONTO_OLD    (1200u << 10)
#define ONTO_GROWN  (2560u << 10)

static unsigned char *grow_onto_cached(unsigned char **left)
{
    arm_cache();
    unsigned char *a = malloc(ONTO_CACHED), *b = malloc(ONTO_OLD);
    cr_assert(a && b);
    memset(a, 1, ONTO_CACHED);
    for (size_t i = 0; i < ONTO_OLD; i++)
        b[i] = (unsigned char)(i * 13);
    free(a);
    unsigned char *r = realloc(b, ONTO_GROWN);
    cr_assert_not_null(r);
    cr_assert_eq(r, a, "the grown block did not land on the cached one (%p, cached %p)",
                 (void *)r, (void *)a);
    *left = b;
    return r;
}

Test(large, a_block_that_outgrows_its_mapping_moves_onto_a_warm_cached_one)
{
    /* The grown part is the cached block's resident pages (growing in
     * place faulted in all 340 of them). */
    unsigned char *left, *r = grow_onto_cached(&left);
    long f0 = minor_faults();
    memset(r + ONTO_OLD, 2, ONTO_GROWN - ONTO_OLD);
    long faults = minor_faults() - f0;
    cr_assert_lt(faults, 20, "the grown part faulted %ld times", faults);
    for (size_t i = 0; i < ONTO_OLD; i++)
        cr_assert_eq(r[i], (unsigned char)(i * 13), "byte %zu", i);
    free(r);
}

Test(large, the_mapping_a_block_grew_out_of_is_cached_warm)
{
    /* The 1.2 MiB block is copied onto the cached 3 MiB block, and its own
     * written mapping takes that one's place in the cache, so the next 1.2
     * MiB request gets it back with no faults (moving its pages instead
     * unmapped the cached block's front, and a batch of such buffers
     * mapped afresh what it grew out of). */
    unsigned char *left, *r = grow_onto_cached(&left);
    struct tally_stats s0 = stats();
    unsigned char *c = malloc(ONTO_OLD);
    cr_assert_eq(c, left, "a 1.2 MiB request did not get the mapping left behind (%p, left %p)",
                 (void *)c, (void *)left);
    long f0 = minor_faults();
    memset(c, 4, ONTO_OLD);
    long faults = minor_faults() - f0;
    cr_assert_lt(faults, 20, "the mapping left behind faulted %ld times", faults);
    cr_assert_eq(stats().mmap_calls, s0.mmap_calls, "the request mapped afresh");
    free(c);
    free(r);
}

/* The same from a segment up, where the block's pages move onto the
 * cached entry's front instead of being copied (large.c,
 * large_move_onto_cached): a written 6 MiB block grown to 12 MiB while a
 * written 24 MiB block waits in the cache. The grown block keeps its
 * bytes, its new part is the entry's resident pages, and the entry's rest
 * stays part of the block: freed and asked for again whole, it is there,
 * warm and intact. */
Test(large, a_block_from_a_segment_up_moves_its_pages_onto_a_cached_one)
{
    size_t cached = 24u << 20, old = 6u << 20, grown = 12u << 20;
    arm_cache();
    unsigned char *a = malloc(cached), *b = malloc(old);
    cr_assert(a && b);
    memset(a, 1, cached);
    for (size_t i = 0; i < old; i += 64)
        b[i] = (unsigned char)(i / 64 * 7);
    free(a);
    struct tally_stats s0 = stats();
    unsigned char *r = realloc(b, grown);
    cr_assert_not_null(r);
    cr_assert_eq(r, a, "the grown block did not land on the cached one (%p, cached %p)",
                 (void *)r, (void *)a);
    cr_assert_eq(stats().mmap_calls, s0.mmap_calls, "the growth mapped afresh");
    for (size_t i = 0; i < old; i += 64)
        cr_assert_eq(r[i], (unsigned char)(i / 64 * 7), "byte %zu", i);
    long f0 = minor_faults();
    memset(r + old, 2, grown - old);
    long faults = minor_faults() - f0;
    cr_assert_lt(faults, 64, "the grown part faulted %ld times", faults);
    for (size_t i = 0; i < old; i += 64)
        cr_assert_eq(r[i], (unsigned char)(i / 64 * 7), "byte %zu after the write", i);
    cr_assert_eq(r[grown - 1], 2);
    free(r);
    /* The whole entry again: the block's pages and the rest it took. */
    unsigned char *w = malloc(cached);
    cr_assert_eq(w, a, "the entry did not come back whole (%p, was %p)", (void *)w, (void *)a);
    f0 = minor_faults();
    memset(w, 3, cached);
    faults = minor_faults() - f0;
    cr_assert_lt(faults, 64, "the entry came back with %ld pages to fault", faults);
    free(w);
}

Test(large, calloc_of_a_reused_large_block_is_zero)
{
    for (size_t n = 1u << 20; n <= (24u << 20); n = n * 3 / 2) {
        unsigned char *p = malloc(n);
        memset(p, 0xee, n);
        free(p);
        unsigned char *z = calloc(1, n);
        for (size_t i = 0; i < n; i += 512)
            cr_assert_eq(z[i], 0, "calloc(%zu) byte %zu", n, i);
        cr_assert_eq(z[n - 1], 0);
        free(z);
    }
}

/* calloc clears a reused block's written pages and leaves the others
 * alone: they read as zero already, and clearing them made every page of
 * the block resident (a program that callocs big tables and touches a
 * little of each went from 1.32 s and 236 MB to 0.107 s and 3.5 MB). */
Test(large, calloc_of_a_reused_large_block_clears_only_the_pages_written)
{
    size_t n = 8u << 20, pg = 4096;
    arm_cache();
    unsigned char *p = malloc(n);
    cr_assert_not_null(p);
    /* The first page, 300 pages across the end of the first MiB (the
     * first pagemap read), one in the middle, the last. */
    static const size_t runs[][2] = { { 0, 1 }, { 100, 300 }, { 1000, 1 }, { 2047, 1 } };
    size_t written = 0;
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        size_t a = runs[r][0] * pg, b = a + runs[r][1] * pg;
        memset(p + a, 0xee, (b < n ? b : n) - a);
        written += runs[r][1] + 1;          /* the block need not start on a page */
    }
    free(p);
    unsigned char *z = calloc(1, n);
    cr_assert_eq(z, p, "the cache did not hand the block back (%p, was %p)", (void *)z, (void *)p);
    size_t resident = pages_in_ram(z, n);
    cr_assert_leq(resident, written + 2, "%zu pages resident after calloc, %zu written before",
                  resident, written);
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++)
        for (size_t i = runs[r][0] * pg; i < (runs[r][0] + runs[r][1]) * pg && i < n; i++)
            cr_assert_eq(z[i], 0, "byte %zu", i);
    for (size_t i = 0; i < n; i += 997)
        cr_assert_eq(z[i], 0, "byte %zu", i);
    free(z);
}

Test(large, split_and_grown_cache_entries_keep_blocks_intact)
{
    /* Big then small then big again: exercises splitting a cached mapping
     * and growing a smaller one. */
    static const size_t sizes[] = { 30u << 20, 1u << 20, 9u << 20, 2u << 20, 28u << 20, 600u << 10 };
    unsigned char *v[6];
    for (int round = 0; round < 4; round++) {
        for (int i = 0; i < 6; i++) {
            v[i] = malloc(sizes[i]);
            memset(v[i], i + round, sizes[i]);
        }
        for (int i = 0; i < 6; i++) {
            cr_assert_eq(v[i][0], i + round);
            cr_assert_eq(v[i][sizes[i] - 1], i + round);
            free(v[i]);
        }
    }
}

Test(large, malloc_trim_releases_the_cache)
{
    size_t n = 20u << 20;
    cache_one(n);
    long cached = rss_kib();
    cr_assert_eq(malloc_trim(0), 1);
    cr_assert_lt(rss_kib(), cached - 15 * 1024, "the cached block's pages were returned");
}

/* Bytes still mapped after a touched block of n bytes is freed. */
static uint64_t kept_after_free(size_t n)
{
    uint64_t before = stats().mapped_bytes;
    char *p = malloc(n);
    memset(p, 1, n);
    free(p);
    uint64_t after = stats().mapped_bytes;
    return after > before ? after - before : 0;
}

Test(large, a_one_off_large_block_goes_back_at_once)
{
    /* qsort's temporary or a file read whole: nothing says the program
     * will ask again, so its pages must not stay resident. */
    size_t n = 8u << 20;
    long rss = rss_kib();
    cr_assert_eq(kept_after_free(n), 0, "the first large block freed stayed mapped");
    cr_assert_lt(rss_kib(), rss + 1024, "its pages are no longer resident");
}

Test(large, a_large_request_after_a_large_free_arms_the_cache)
{
    size_t n = 8u << 20;
    cr_assert_eq(kept_after_free(n), 0);
    /* The request that follows the free arms the cache: its block stays. */
    cr_assert_geq(kept_after_free(n), n, "the second large block freed was not kept");
}

Test(large, a_second_large_free_arms_the_cache)
{
    /* A batch of buffers freed together (a server's round of requests):
     * the first goes back, the next stays for the next batch to reuse. */
    size_t n = 8u << 20;
    char *a = malloc(n), *b = malloc(n);
    cr_assert(a && b);
    memset(a, 1, n);
    memset(b, 1, n);
    uint64_t before = stats().mapped_bytes;
    free(a);
    uint64_t after_first = stats().mapped_bytes;
    cr_assert_leq(after_first + n, before, "the first large block freed stayed mapped");
    free(b);
    cr_assert_eq(stats().mapped_bytes, after_first, "the second large block freed was not kept");
    char *c = malloc(n);
    cr_assert_eq(c, b, "the next request did not take the kept block");
    free(c);
}

/* A program that frees big blocks and goes on to other work gets all but
 * a warm reserve back once they stayed free for purge_delay, at its next
 * large request, not a second later (large_cache.h). */
Test(large, cached_blocks_beyond_the_warm_reserve_go_back_after_purge_delay)
{
    enum { N = 4 };
    size_t n = 8u << 20;
    char *v[N];
    cr_assert_eq(tally_option_set("purge_delay", "50"), 0);
    arm_cache();
    for (int i = 0; i < N; i++) {
        v[i] = malloc(n);
        cr_assert_not_null(v[i]);
        memset(v[i], 1, n);
    }
    uint64_t live = stats().mapped_bytes;
    for (int i = 0; i < N; i++)
        free(v[i]);
    cr_assert_geq(stats().mapped_bytes + n, live, "the freed blocks were not kept");
    sleep_ms(150);
    free(malloc(2u << 20));
    uint64_t after = stats().mapped_bytes;
    cr_assert_leq(after + (N - 1) * n, live,
                  "%" PRIu64 " of %" PRIu64 " bytes still mapped 150 ms after the free", after, live);
}

Test(large, malloc_trim_disarms_the_cache)
{
    size_t n = 8u << 20;
    cache_one(n);
    malloc_trim(0);
    cr_assert_eq(kept_after_free(n), 0, "a block freed after malloc_trim stayed mapped");
}

Test(large, a_lowered_threshold_sends_a_medium_size_to_its_own_mapping)
{
    /* A freed 20,000 B block waits on its class's page, where malloc's
     * medium lane would pop it; past a lowered threshold the next request
     * of that size must get a large block (a mapping or a span run)
     * instead. */
    void *p = malloc(20000);
    free(p);
    cr_assert_eq(tally_option_set("mmap_threshold", "16k"), 0);
    uint64_t before = stats().large_count;
    void *q = malloc(20000);
    cr_assert_neq(q, p, "the medium block came back past the threshold");
    cr_assert_eq(stats().large_count, before + 1);
    free(q);
    cr_assert_eq(tally_option_set("mmap_threshold", "512k"), 0);
    void *r = malloc(20000);
    cr_assert_eq(r, p, "below the threshold again, the freed medium block is reused");
    free(r);
}
