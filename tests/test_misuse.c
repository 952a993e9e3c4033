/*
 * test_misuse.c - every misuse tally can see aborts with one clear line on
 * stderr naming the function and the pointer. Each case runs in a child.
 */
#include "helpers.h"
#include "../alloc/segment.h"
#include "../alloc/remote.h"
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdint.h>

static void expect_abort(void (*fn)(void *), const char *text)
{
    struct child_result r = run_in_child(fn, NULL);
    cr_assert_eq(child_signal(&r), SIGABRT, "child should abort; stderr: %s", r.err);
    cr_assert(strstr(r.err, text) != NULL, "stderr lacks '%s': %s", text, r.err);
    cr_assert(strstr(r.err, "tally: ") != NULL && strstr(r.err, "0x") != NULL,
              "report names tally and the address: %s", r.err);
}

static void free_stack_pointer(void *arg)
{
    (void)arg;
    char local[16];
    void *volatile p = local;
    free(p);
}

static void free_static_pointer(void *arg)
{
    (void)arg;
    static char data[64];
    void *volatile p = data;
    free(p);
}

static void double_free_small(void *arg)
{
    (void)arg;
    void *volatile p = malloc(32);
    free(p);
    free(p);
}

static void double_free_large(void *arg)
{
    (void)arg;
    void *volatile p = malloc(8 << 20);
    free(p);
    free(p);
}

/* A block from a span segment (alloc/span.h): freed, its segment stays
 * tagged, so the report comes from the run's own bookkeeping. */
static void double_free_span(void *arg)
{
    (void)arg;
    void *volatile p = malloc(600 << 10);
    free(p);
    free(p);
}

static void free_inside_span(void *arg)
{
    (void)arg;
    char *volatile p = malloc(600 << 10);
    free(p + (64 << 10));
}

static void free_inside_large(void *arg)
{
    (void)arg;
    char *volatile p = malloc(16 << 20);
    free(p + (5 << 20));
}

static void realloc_foreign(void *arg)
{
    (void)arg;
    static char data[64];
    void *volatile p = data;
    p = realloc(p, 100);
}

static void usable_size_foreign(void *arg)
{
    (void)arg;
    char local[16];
    void *volatile p = local;
    (void)malloc_usable_size(p);
}

static void free_garbage(void *arg)
{
    (void)arg;
    void *volatile p = (void *)0x123456789abcULL;
    free(p);
}

/* A pointer into a page of the caller's own segment that no class holds:
 * its segment map entry is the caller's, so only the page's descriptor can
 * stop free()'s fast path from pushing it onto a list. */
static void free_into_unassigned_page(void *arg)
{
    (void)arg;
    uintptr_t b = (uintptr_t)malloc(32);
    char *volatile p = (char *)((b & ~(uintptr_t)((4u << 20) - 1)) + 60 * (64u << 10));
    free(p);
}

/* A pointer into a medium segment's 64 KiB header: the fast path's slice
 * lookup lands on the descriptor of the segment's first page (pages[0]),
 * which is open.
 * Pushed, it dropped the page's count (the sweep then gave back the page
 * under a live block) and the next malloc of the class returned it. */
static void free_into_medium_header(void *arg)
{
    (void)arg;
    uintptr_t b = (uintptr_t)malloc(30000);      /* medium: below SPAN_MIN */
    char *volatile p = (char *)((b & ~(uintptr_t)((4u << 20) - 1)) + (32u << 10));
    free(p);
}

Test(misuse, free_of_stack_pointer) { expect_abort(free_stack_pointer, "free(): invalid pointer"); }
Test(misuse, free_of_static_pointer) { expect_abort(free_static_pointer, "free(): invalid pointer"); }
Test(misuse, free_of_garbage) { expect_abort(free_garbage, "free(): invalid pointer"); }
Test(misuse, double_free_of_small_block) { expect_abort(double_free_small, "double free"); }
Test(misuse, double_free_of_large_block) { expect_abort(double_free_large, "free(): invalid pointer"); }
Test(misuse, free_inside_large_block) { expect_abort(free_inside_large, "invalid pointer"); }
Test(misuse, double_free_of_span_block) { expect_abort(double_free_span, "free(): invalid pointer"); }
Test(misuse, free_inside_span_block) { expect_abort(free_inside_span, "free(): invalid pointer"); }
Test(misuse, realloc_of_foreign_pointer) { expect_abort(realloc_foreign, "realloc(): invalid pointer"); }

/* realloc of the caller's own blocks has a lane of its own (malloc.c,
 * realloc_own): it checks the pointer as the general path does, for a
 * growth (a move), for a size the block already has (no move), and for a
 * medium block. The child runs the case set before it forks. */
static const struct { size_t size, inside, new_size; } realloc_cases[] = {
    { 100, 16, 300 }, { 100, 32, 60 }, { 20000, 4096, 30000 },
};
static int realloc_case;

static void realloc_inside_own(void *arg)
{
    (void)arg;
    char *volatile p = malloc(realloc_cases[realloc_case].size);
    p = realloc(p + realloc_cases[realloc_case].inside, realloc_cases[realloc_case].new_size);
}

static void expect_realloc_inside_aborts(int which)
{
    realloc_case = which;
    expect_abort(realloc_inside_own, "realloc(): invalid pointer");
}

/* malloc_usable_size's lane for the caller's own blocks checks too. */
static void usable_size_inside_small(void *arg)
{
    (void)arg;
    char *volatile p = malloc(100);
    (void)malloc_usable_size(p + 8);
}

Test(misuse, usable_size_inside_own_small_block)
{
    expect_abort(usable_size_inside_small, "malloc_usable_size(): invalid pointer");
}

Test(misuse, realloc_inside_own_small_block_that_grows) { expect_realloc_inside_aborts(0); }
Test(misuse, realloc_inside_own_small_block_that_fits) { expect_realloc_inside_aborts(1); }
Test(misuse, realloc_inside_own_medium_block) { expect_realloc_inside_aborts(2); }
/* Medium frees of the caller's own blocks have a lane of their own
 * (raw_free_own): it checks the block against the owner's descriptor. */
static void free_inside_medium(void *arg)
{
    (void)arg;
    char *volatile p = malloc(20000);
    free(p + 4096);
}

/* Where the blocks of b's medium page start: its 1 MiB slice of the
 * segment, 64 KiB in for the first (the header). */
static uintptr_t medium_page_start(const void *b)
{
    uintptr_t page = (uintptr_t)b & ~(uintptr_t)((1u << 20) - 1);
    return (page & ((4u << 20) - 1)) ? page : page + (64u << 10);
}

static void free_past_the_carved_medium_blocks(void *arg)
{
    (void)arg;
    char *b = malloc(20000);    /* medium: below SPAN_MIN */
    /* The start of block 30 of b's page (48 fit in the first, 51 in the
     * others), not carved by a child that took one. */
    char *volatile p = (char *)(medium_page_start(b) + 30 * malloc_usable_size(b));
    free(p);
}

/* A medium block of a page past its segment's first (the block's 1 MiB
 * slice names its page: raw_free_own), or exit 3 when none came. */
static char *medium_block_past_the_first_page(void)
{
    for (int i = 0; i < 400; i++) {
        char *b = malloc(20000);
        if ((uintptr_t)b & ((4u << 20) - 1) & ~(uintptr_t)((1u << 20) - 1))
            return b;
    }
    _exit(3);
}

static void free_inside_a_later_medium_page(void *arg)
{
    (void)arg;
    char *volatile p = medium_block_past_the_first_page();
    free(p + 4096);
}

static void free_past_the_carved_blocks_of_a_later_medium_page(void *arg)
{
    (void)arg;
    char *b = medium_block_past_the_first_page();
    char *volatile p = (char *)(medium_page_start(b) + 50 * malloc_usable_size(b));
    free(p);
}

static void double_free_in_a_later_medium_page(void *arg)
{
    (void)arg;
    void *volatile p = medium_block_past_the_first_page();
    free(p);
    free(p);
}

static void double_free_medium(void *arg)
{
    (void)arg;
    void *volatile p = malloc(20000);
    free(p);
    free(p);
}

Test(misuse, free_inside_a_medium_block)
{
    expect_abort(free_inside_medium, "free(): invalid pointer (not the start of a block)");
}
Test(misuse, free_past_the_carved_blocks_of_a_medium_page)
{
    expect_abort(free_past_the_carved_medium_blocks,
                 "free(): invalid pointer (not the start of a block)");
}
Test(misuse, double_free_of_medium_block) { expect_abort(double_free_medium, "double free"); }
Test(misuse, a_medium_page_past_the_first_checks_its_own_blocks)
{
    expect_abort(free_inside_a_later_medium_page,
                 "free(): invalid pointer (not the start of a block)");
    expect_abort(free_past_the_carved_blocks_of_a_later_medium_page,
                 "free(): invalid pointer (not the start of a block)");
    expect_abort(double_free_in_a_later_medium_page, "double free");
}

Test(misuse, free_into_an_unassigned_page_of_a_live_segment)
{
    expect_abort(free_into_unassigned_page, "free(): invalid pointer");
}
Test(misuse, free_into_the_header_of_a_medium_segment)
{
    expect_abort(free_into_medium_header, "free(): invalid pointer (not the start of a block)");
}
Test(misuse, usable_size_of_foreign_pointer)
{
    expect_abort(usable_size_foreign, "malloc_usable_size(): invalid pointer");
}

/* A pointer with a bit above 46 set: tally maps nothing there, but the
 * segmap reads only bits 22..46, so it aliased the block's own segment and
 * the shape check read a header at a non-canonical address (SIGSEGV, no
 * report). free()'s fast path does not test for it (docs/design.md); every
 * slow path does. */
static void *non_canonical(void *p) { return (void *)((uintptr_t)p | (UINT64_C(1) << 63)); }

static void usable_size_non_canonical(void *arg)
{
    (void)arg;
    void *volatile p = non_canonical(malloc(64));
    (void)malloc_usable_size(p);
}

static void realloc_non_canonical(void *arg)
{
    (void)arg;
    void *volatile p = non_canonical(malloc(64));
    p = realloc(p, 100);
}

static void *alloc_on_thread(void *arg)
{
    *(void **)arg = malloc(64);
    return NULL;
}

/* Another thread's block: free()'s slow path, toward the remote free. */
static void free_non_canonical_remote(void *arg)
{
    (void)arg;
    void *b = NULL;
    run_in_thread(alloc_on_thread, &b);
    void *volatile p = non_canonical(b);
    free(p);
}

Test(misuse, usable_size_of_non_canonical_pointer)
{
    expect_abort(usable_size_non_canonical, "malloc_usable_size(): invalid pointer");
}
Test(misuse, realloc_of_non_canonical_pointer)
{
    expect_abort(realloc_non_canonical, "realloc(): invalid pointer");
}
Test(misuse, free_of_non_canonical_pointer_to_another_threads_block)
{
    expect_abort(free_non_canonical_remote, "free(): invalid pointer");
}

/* A thread that adopted a buffer of a sleeping owner's blocks keeps that
 * owner's next frees at once, on a path of free's of its own (remote.h,
 * tls_adopt_tag): it checks them as every other thread's block is
 * checked. main builds 17 transfer buffers' worth of 64 B blocks and one
 * more, then waits while a worker frees the 17 buffers' worth (the last
 * one is adopted) and then a bad pointer into main's last block. */
/* A stack REMOTE_ADOPT_DEPTH blocks deep, and the next full buffer. */
enum { ADOPTED_BLOCKS = (REMOTE_ADOPT_DEPTH / REMOTE_BUF_BLOCKS + 1) * REMOTE_BUF_BLOCKS + 1 };

struct adopted_misuse { void **v; void *(*bad)(void *); };

static void *misuse_while_adopting(void *arg)
{
    struct adopted_misuse *a = arg;
    void *own = malloc(1000);   /* a thread adopts only into a heap of its own */
    for (int i = 0; i < ADOPTED_BLOCKS - 1; i++)
        free(a->v[i]);
    void *volatile p = a->bad(a->v[ADOPTED_BLOCKS - 1]);
    free(p);
    free(own);
    return NULL;
}

static void *inside_the_block(void *p) { return (char *)p + 16; }

static void free_while_adopting(void *(*bad)(void *))
{
    static void *v[ADOPTED_BLOCKS];
    for (int i = 0; i < ADOPTED_BLOCKS; i++)
        v[i] = malloc(64);
    struct adopted_misuse a = { v, bad };
    run_in_thread(misuse_while_adopting, &a);
}

static void free_inside_adopted(void *arg) { (void)arg; free_while_adopting(inside_the_block); }
static void free_non_canonical_adopted(void *arg) { (void)arg; free_while_adopting(non_canonical); }

Test(misuse, free_inside_a_block_of_an_owner_being_adopted_from)
{
    expect_abort(free_inside_adopted, "free(): invalid pointer (not the start of a block)");
}
Test(misuse, free_of_non_canonical_pointer_to_an_adopted_owners_block)
{
    expect_abort(free_non_canonical_adopted, "free(): invalid pointer");
}

/* The start of the next block of a medium page's fresh run (the pointer
 * just past the last block malloc returned) passes the shape check, since
 * the run is carved; pushed, it came out of malloc twice. The page's
 * descriptor says where the run is, so the case does not depend on what
 * the process allocated before. */
static bool in_fresh_run(const void *p)
{
    struct segment *s = segment_of(p);
    struct page *pg = segment_page_of(s, p);
    uint32_t off = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
    return off >= pg->fresh && off < pg->fresh_end;
}

static void free_past_the_last_medium_block(void *arg)
{
    (void)arg;
    for (int i = 0; i < 1000; i++) {
        char *b = malloc(9000);
        char *next = b + malloc_usable_size(b);
        if (in_fresh_run(next)) {
            free(next);
            _exit(2);           /* not caught */
        }
    }
    _exit(3);                   /* no fresh run found: the case never ran */
}

Test(misuse, free_of_a_block_never_handed_out)
{
    expect_abort(free_past_the_last_medium_block, "free(): invalid pointer (never handed out)");
}
