/*
 * test_secure.c - secure=1: guard pages after large blocks and at the end
 * of segments, random slot order, every free validated. Each case runs in
 * a child that switches secure mode on before mapping anything new.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdint.h>
#include "tally.h"

static void secure_on(void) { cr_assert_eq(tally_option_set("secure", "1"), 0); }

static void write_past_large(void *arg)
{
    (void)arg;
    secure_on();
    volatile char *p = malloc(1 << 20);
    size_t u = malloc_usable_size((void *)p);
    p[u - 1] = 1;             /* fine */
    p[u] = 1;                 /* the guard page */
    _exit(0);
}

Test(secure, guard_page_after_a_large_block)
{
    struct child_result r = run_in_child(write_past_large, NULL);
    cr_assert_eq(child_signal(&r), SIGSEGV, "status %d: %s", r.status, r.err);
}

/* Allocates `tries` blocks of `request` bytes (`block` bytes of their
 * class), writes the last byte of the latest one that ends where its
 * segment's guard begins (fine), then the guard. The latest: it is in a
 * segment mapped after secure mode went on (earlier segments, from
 * before, have no guard). */
struct guard_case { size_t request, block; int tries; };

static void write_into_the_guard(void *arg)
{
    const struct guard_case *c = arg;
    secure_on();
    volatile char *last = NULL;
    for (int i = 0; i < c->tries; i++) {
        volatile char *p = malloc(c->request);
        uintptr_t end = ((uintptr_t)p & ((4u << 20) - 1)) + c->block;
        if (end + 4096 == (4u << 20))
            last = p;
    }
    if (!last)
        _exit(4);             /* never found a block next to a guard */
    last[c->block - 1] = 1;   /* the last byte before the guard: fine */
    *(volatile char *)((uintptr_t)last + c->block) = 1;     /* the guard page */
    _exit(3);
}

static void expect_the_guard_to_fault(struct guard_case c)
{
    struct child_result r = run_in_child(write_into_the_guard, &c);
    cr_assert_eq(child_signal(&r), SIGSEGV, "status %d: %s", r.status, r.err);
}

/* 5120-byte blocks tile a small segment's last page's 60 KiB exactly. */
Test(secure, guard_page_at_the_end_of_a_segment)
{
    expect_the_guard_to_fault((struct guard_case){ 5000, 5120, 4000 });
}

/* A medium segment's last 1 MiB page gives up its last OS page to the
 * guard: 102 blocks of 10 KiB tile the 1,020 KiB left exactly. */
Test(secure, guard_page_at_the_end_of_a_medium_segment)
{
    expect_the_guard_to_fault((struct guard_case){ 10240, 10240, 3000 });
}

static void fill_medium_segments(void *arg)
{
    (void)arg;
    secure_on();
    /* 16 KiB blocks: 64 would fit a whole 1 MiB page, 63 fit before the
     * last page's guard. Written whole, a block that reached into the
     * guard would fault; 600 of them fill two segments' pages. */
    for (int i = 0; i < 600; i++) {
        char *p = malloc(16384);
        if (!p)
            _exit(5);
        if (((uintptr_t)p & ((4u << 20) - 1)) + 16384 > (4u << 20) - 4096)
            _exit(6);         /* a block overlaps the guard */
        memset(p, 1, 16384);
    }
    _exit(0);
}

Test(secure, medium_blocks_stop_before_the_guard)
{
    struct child_result r = run_in_child(fill_medium_segments, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %#x (signal %d): %s",
              r.status, child_signal(&r), r.err);
}

static void shuffled(void *arg)
{
    (void)arg;
    secure_on();
    uintptr_t prev = 0;
    int inversions = 0;
    for (int i = 0; i < 200; i++) {
        uintptr_t p = (uintptr_t)malloc(176);    /* a class nobody used yet */
        inversions += p < prev;
        prev = p;
    }
    _exit(inversions > 20 ? 0 : 5);
}

Test(secure, slots_are_handed_out_in_random_order)
{
    struct child_result r = run_in_child(shuffled, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %d", r.status);
}

static void interior_free(void *arg)
{
    (void)arg;
    secure_on();
    char *volatile p = malloc(100);
    free(p + 16);
}

Test(secure, every_free_is_validated)
{
    struct child_result r = run_in_child(interior_free, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "%s", r.err);
    cr_assert(strstr(r.err, "not the start of a block"), "%s", r.err);
}

Test(secure, guarded_large_blocks_grow_and_shrink)
{
    secure_on();
    unsigned char *p = malloc(2 << 20);
    memset(p, 7, 2 << 20);
    p = realloc(p, 9 << 20);
    cr_assert_eq(p[(2 << 20) - 1], 7);
    memset(p, 8, malloc_usable_size(p));
    p = realloc(p, 3 << 20);
    cr_assert_eq(p[(3 << 20) - 1], 8);
    free(p);
    tally_option_set("secure", "0");
}

/* A sweep's partial purge rebuilt a sparse page's free list in address
 * order, and the held blocks came back in address order too: after it,
 * most mallocs got the block right after the previous one. */
static void *after_a_partial_purge(void *arg)
{
    enum { N = 4000, SIZE = 256, TAKE = 3000 };
    static char *v[N];
    int *adjacent = arg;
    for (int i = 0; i < N; i++) {
        v[i] = malloc(SIZE);
        memset(v[i], 1, SIZE);
    }
    size_t stride = malloc_usable_size(v[0]);
    for (int i = 0; i < N; i++)
        if (i % 64)
            free(v[i]);
    for (int round = 0; round < 10; round++) {
        usleep(3000);
        for (int k = 0; k < 300; k++) {
            void *volatile q = malloc(3000);
            free(q);
        }
    }
    char *prev = NULL;
    for (int i = 0; i < TAKE; i++) {
        char *p = malloc(SIZE);
        memset(p, 2, SIZE);
        if (prev && (size_t)(p - prev) == stride)
            (*adjacent)++;
        prev = p;
    }
    return NULL;
}

static void shuffled_after_purge(void *arg)
{
    (void)arg;
    secure_on();
    cr_assert_eq(tally_option_set("purge_delay", "0"), 0);
    int adjacent = 0;
    run_in_thread(after_a_partial_purge, &adjacent);
    if (adjacent > 600) {
        fprintf(stderr, "%d of 2999 mallocs got the next block\n", adjacent);
        _exit(1);
    }
}

Test(secure, slots_stay_in_random_order_after_a_partial_purge)
{
    struct child_result r = run_in_child(shuffled_after_purge, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "status %d: %s", r.status, r.err);
}

/* Secure mode validates every free, so a non-canonical alias of a live
 * block (a bit above 46 set: the segmap reads bits 22..46 only) must be
 * reported, not followed to a header at a non-canonical address (SIGSEGV). */
static void non_canonical_free(void *arg)
{
    (void)arg;
    secure_on();
    uintptr_t b = (uintptr_t)malloc(100);
    void *volatile p = (void *)(b | (UINT64_C(1) << 63));
    free(p);
}

Test(secure, a_non_canonical_pointer_is_reported)
{
    struct child_result r = run_in_child(non_canonical_free, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "%s", r.err);
    cr_assert(strstr(r.err, "free(): invalid pointer"), "%s", r.err);
}
