/*
 * test_touch.c - malloc leaves fresh memory to the caller: the page fault
 * of a never-used OS page is taken by the caller's first write, not inside
 * malloc (which would put a fault's microseconds into malloc's latency).
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <stdint.h>
#include "tally.h"

static long faults_inside_malloc(size_t size, int calls)
{
    long inside = 0;
    for (int i = 0; i < calls; i++) {
        long before = minor_faults();
        char *p = malloc(size);
        inside += minor_faults() - before;
        cr_assert_not_null(p);
        p[0] = 1;                       /* the caller touches its block */
    }
    return inside;
}

Test(touch, small_blocks_from_fresh_pages_fault_in_the_caller)
{
    free(malloc(256));                  /* segment and page set up */
    free(malloc(1024));
    /* 4096 blocks of 256 B and 1024 of 1 KiB: 256 fresh OS pages each; a
     * carve that wrote links into them took one fault per page in malloc. */
    long inside = faults_inside_malloc(256, 4096) + faults_inside_malloc(1024, 1024);
    cr_assert_lt(inside, 24, "%ld page faults inside malloc", inside);
}

Test(touch, blocks_carved_later_are_intact_and_distinct)
{
    /* The untouched first block of each OS page and the run threaded after
     * it must not overlap: fill every block with its index and check. */
    enum { N = 3000 };
    static unsigned char *v[N];
    for (int i = 0; i < N; i++) {
        size_t size = 48 + (size_t)(i % 7) * 160;
        v[i] = malloc(size);
        memset(v[i], i & 0xff, size);
    }
    for (int i = 0; i < N; i++) {
        size_t size = 48 + (size_t)(i % 7) * 160;
        for (size_t k = 0; k < size; k += 37)
            cr_assert_eq(v[i][k], (unsigned char)(i & 0xff), "block %d byte %zu", i, k);
        free(v[i]);
    }
}

Test(touch, malloc_writes_no_block_it_has_not_handed_out)
{
    /* Fresh blocks go out from the page's fresh run, untouched: the block
     * after the one just returned still reads as the zeros of its fresh
     * mapping. (Threading a run onto the free list wrote a link into each
     * of its blocks as soon as the caller had touched their OS page.) */
    enum { N = 300 };
    size_t bs = 1024;
    char *v[N];
    int checked = 0, written = 0;
    for (int i = 0; i < N; i++) {
        v[i] = malloc(1000);
        cr_assert_not_null(v[i]);
        memset(v[i], 0x5a, 1000);       /* the caller uses its block */
        if (i == 0 || v[i] != v[i - 1] + bs)
            continue;                   /* not the next block of a run */
        char *next = v[i] + bs;
        if (((uintptr_t)next & 0xffff) == 0)
            continue;                   /* the next page, not this run */
        uintptr_t word;
        memcpy(&word, next, sizeof word);
        checked++;
        written += word != 0;
    }
    cr_assert_gt(checked, N / 2, "only %d blocks were followed by a fresh one", checked);
    cr_assert_eq(written, 0, "%d of %d blocks not handed out yet were written", written,
                 checked);
    for (int i = 0; i < N; i++)
        free(v[i]);
}

Test(touch, a_new_medium_segment_faults_one_header_page)
{
    /* Seven 500,000 B blocks fill a 4 MiB segment, so 70 calls map ten
     * segments. The header's fields, shapes and first descriptors share
     * one OS page, and a fresh mapping's zeros are not written again:
     * one fault per segment (two when the shapes sat past the descriptors
     * and every slice's descriptor was written; three with span header
     * slots a unit each, spread over three pages). */
    long inside = faults_inside_malloc(500000, 70);
    cr_assert_leq(inside, 13, "70 mallocs of 500,000 B took %ld faults", inside);
}

Test(touch, a_growing_heap_maps_its_segments_a_reservation_at_a_time)
{
    /* 140 blocks of 500,000 B need 20 new segments. One mmap each made
     * every 7th call pay for it; reservations that double from 4 segments
     * take at most 4 calls here. */
    struct tally_stats before = { .size = sizeof before }, after = { .size = sizeof after };
    tally_stats_get(&before);
    for (int i = 0; i < 140; i++) {
        char *p = malloc(500000);
        cr_assert_not_null(p);
        p[0] = p[499999] = (char)i;
    }
    tally_stats_get(&after);
    uint64_t maps = after.mmap_calls - before.mmap_calls;
    cr_assert_leq(maps, 4, "20 segments took %llu mmap calls", (unsigned long long)maps);
}
