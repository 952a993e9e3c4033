/*
 * test_hooks.c - user hooks: called for each operation, safe when they
 * allocate, safe from many threads, removable.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "tally.h"

static atomic_long allocs, frees, reallocs;
static _Thread_local void *last_alloc;

static void on_alloc(void *p, size_t size, void *ctx)
{
    cr_assert_eq(ctx, (void *)&allocs);
    last_alloc = p;
    atomic_fetch_add(&allocs, 1);
    free(malloc(size));          /* allocating inside a hook must not recurse */
}

static void on_free(void *p, void *ctx)
{
    (void)p;
    (void)ctx;
    atomic_fetch_add(&frees, 1);
}

static void on_realloc(void *old, void *p, size_t size, void *ctx)
{
    (void)old;
    (void)p;
    (void)size;
    (void)ctx;
    atomic_fetch_add(&reallocs, 1);
}

static const struct tally_hooks hooks = { sizeof hooks, on_alloc, on_free, on_realloc, &allocs };

Test(hooks, called_once_per_operation)
{
    cr_assert_eq(tally_hooks_set(&hooks), 0);
    void *p = malloc(123);
    cr_assert_eq(last_alloc, p);
    p = realloc(p, 500);
    free(p);
    cr_assert_eq(tally_hooks_set(NULL), 0);
    cr_assert_eq(atomic_load(&allocs), 1);
    cr_assert_eq(atomic_load(&reallocs), 1);
    cr_assert_eq(atomic_load(&frees), 1);
    free(malloc(10));                    /* removed: no more calls */
    cr_assert_eq(atomic_load(&allocs), 1);
}

Test(hooks, see_a_medium_size_that_malloc_could_take_at_once)
{
    /* A freed 20,000 B block waits on its class's page, where malloc's
     * medium lane would pop it: with a hook set, the lane must stay shut. */
    free(malloc(20000));
    cr_assert_eq(tally_hooks_set(&hooks), 0);
    void *p = malloc(20000);
    cr_assert_eq(last_alloc, p);
    free(p);
    cr_assert_eq(tally_hooks_set(NULL), 0);
    cr_assert_eq(atomic_load(&allocs), 1);
    cr_assert_eq(atomic_load(&frees), 1);
}

static void *worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 10000; i++)
        free(malloc((size_t)i % 500 + 1));
    return NULL;
}

Test(hooks, thread_safe_counts)
{
    atomic_store(&allocs, 0);
    atomic_store(&frees, 0);
    cr_assert_eq(tally_hooks_set(&hooks), 0);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    tally_hooks_set(NULL);
    /* pthread_create itself may allocate (thread stacks are mmap'd, but
     * libc keeps some state): at least the workers' calls were seen. */
    cr_assert_geq(atomic_load(&allocs), 40000);
    cr_assert_geq(atomic_load(&frees), 40000);
}

Test(hooks, rejects_a_struct_that_is_too_small)
{
    struct tally_hooks h = { .size = 8 };
    cr_assert_eq(tally_hooks_set(&h), -1);
}

/* ---- mode switches against malloc's two plain reads -------------------- */

static atomic_int switching;
static atomic_long undersized;

static void *switch_debug(void *arg)
{
    (void)arg;
    while (atomic_load(&switching)) {
        tally_option_set("debug", "1");
        tally_option_set("debug", "0");
    }
    return NULL;
}

static void *small_sizes(void *arg)
{
    uint64_t s = (uintptr_t)arg * 0x9e3779b97f4a7c15ULL + 1;
    void *keep[32] = { 0 };
    for (int i = 0; i < 3000000 && !atomic_load(&undersized); i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        size_t n = 65 + (size_t)(s >> 11) % 64;      /* 65..128 */
        void *p = malloc(n);
        if (malloc_usable_size(p) < n)
            atomic_fetch_add(&undersized, 1);
        free(keep[i % 32]);
        keep[i % 32] = p;
    }
    for (int i = 0; i < 32; i++)
        free(keep[i]);
    return NULL;
}

/* malloc reads the small limit, then the medium one, with no mode switch
 * in between only most of the time: a thread that saw the small lane shut
 * (a mode on) and the medium lane open (the mode off again, or not yet on
 * in the medium limit) sent a small size down the medium lane, whose class
 * lookup misfiles sizes up to 128 B (a 100 B request got an 80 B block). */
Test(hooks, a_mode_switch_never_sends_a_small_size_down_the_medium_lane, .timeout = 120)
{
    tally_option_set("leaks", "0");     /* blocks made while debug was on stay */
    atomic_store(&switching, 1);
    pthread_t ctl, t[3];
    pthread_create(&ctl, NULL, switch_debug, NULL);
    for (uintptr_t i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, small_sizes, (void *)(i + 1));
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    atomic_store(&switching, 0);
    pthread_join(ctl, NULL);
    cr_assert_eq(atomic_load(&undersized), 0, "%ld blocks smaller than their request",
                 atomic_load(&undersized));
}
