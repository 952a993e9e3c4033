/*
 * test_span_keep.c - a thread's kept span runs (alloc/span_keep.h), on
 * their own: compiled with alloc/span_keep.c itself, against a span layer
 * of this file's (span_give records what comes back, span_busy says what
 * the test sets), so each rule shows without threads racing for a lock.
 */
#include <criterion/criterion.h>
#include "../alloc/span_keep.h"
#include "../alloc/span.h"

static bool busy = true;
static void *given[16];
static size_t given_bytes[16];
static int given_n;

bool span_busy(void) { return busy; }
void span_give(void *run, size_t bytes)
{
    cr_assert_lt(given_n, 16);
    given[given_n] = run;
    given_bytes[given_n++] = bytes;
}

static struct span_keep keep;

static void setup(void)
{
    memset(&keep, 0, sizeof keep);
    span_keep_bind(&keep);
    busy = true;
    given_n = 0;
}

/* A run's address: unit-aligned, as span runs are. */
static void *run_at(unsigned i) { return (void *)((uintptr_t)(i + 1) << 22 | SPAN_UNIT); }

TestSuite(span_keep, .init = setup);

Test(span_keep, a_freed_run_comes_back_for_the_same_size_only)
{
    cr_assert(span_keep_put(run_at(0), 3 * SPAN_UNIT));
    cr_assert_null(span_keep_take(2 * SPAN_UNIT), "a run of another size");
    cr_assert_null(span_keep_take(4 * SPAN_UNIT), "a run of another size");
    cr_assert_eq(span_keep_take(3 * SPAN_UNIT), run_at(0));
    cr_assert_null(span_keep_take(3 * SPAN_UNIT), "taken once only");
    cr_assert_eq(given_n, 0);
}

Test(span_keep, nothing_is_kept_while_no_thread_waits_for_the_lock)
{
    busy = false;
    cr_assert_not(span_keep_put(run_at(0), 2 * SPAN_UNIT));
    busy = true;
    span_keep_bind(NULL);       /* a thread with no heap */
    cr_assert_not(span_keep_put(run_at(0), 2 * SPAN_UNIT));
    cr_assert_null(span_keep_take(2 * SPAN_UNIT));
}

Test(span_keep, runs_above_the_most_are_not_kept)
{
    cr_assert_not(span_keep_put(run_at(0), SPAN_KEEP_MAX + SPAN_UNIT));
    cr_assert(span_keep_put(run_at(1), SPAN_KEEP_MAX));
    cr_assert_eq(span_keep_take(SPAN_KEEP_MAX), run_at(1));
}

Test(span_keep, a_full_keep_gives_back_its_oldest_run)
{
    for (unsigned i = 0; i < SPAN_KEEP_RUNS; i++)
        cr_assert(span_keep_put(run_at(i), (i + 2) * SPAN_UNIT));
    cr_assert_eq(given_n, 0);
    cr_assert(span_keep_put(run_at(9), 2 * SPAN_UNIT));
    cr_assert_eq(given_n, 1);
    cr_assert_eq(given[0], run_at(0));
    cr_assert_eq(given_bytes[0], 2 * SPAN_UNIT, "given back with its own length");
    cr_assert_eq(span_keep_take(2 * SPAN_UNIT), run_at(9));
}

Test(span_keep, a_sweep_gives_back_what_stayed_unused_since_the_last_one)
{
    cr_assert(span_keep_put(run_at(0), 2 * SPAN_UNIT));
    span_keep_sweep(&keep, false);
    cr_assert_eq(given_n, 0, "seen once: still kept");
    cr_assert(span_keep_put(run_at(1), 3 * SPAN_UNIT));
    span_keep_sweep(&keep, false);
    cr_assert_eq(given_n, 1);
    cr_assert_eq(given[0], run_at(0));
    cr_assert_eq(span_keep_take(3 * SPAN_UNIT), run_at(1), "a seen run is still taken");
}

Test(span_keep, a_sweep_of_all_gives_back_every_run)
{
    for (unsigned i = 0; i < SPAN_KEEP_RUNS; i++)
        cr_assert(span_keep_put(run_at(i), 2 * SPAN_UNIT));
    span_keep_sweep(&keep, true);
    cr_assert_eq(given_n, SPAN_KEEP_RUNS);
    cr_assert_null(span_keep_take(2 * SPAN_UNIT));
}
