/*
 * init.c - start-up in named stages, guarded against re-entry.
 *
 * Stage 1 reads TALLY_OPTIONS by walking environ (no getenv, no malloc).
 * Stage 2 creates the thread-exit key and registers the fork handlers; both
 * may, in some libc versions, call malloc, which is fine because the heap
 * machinery needs nothing from these stages to serve that call.
 * Besides the hooks' slow-path dispatch (malloc.c) and heap.c's look at
 * hooks_on() before it lends a block, this is the one place alloc/ calls
 * into instrument/: it loads the option table and lets the hooks settle
 * which modes are on.
 */
#include "init.h"
#include "heap.h"
#include "sizeclass.h"
#include "segment.h"
#include "large_cache.h"
#include "span.h"
#include "lock.h"
#include "background.h"
#include "../instrument/options.h"
#include "../instrument/hooks.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

enum { INIT_NONE, INIT_RUNNING, INIT_DONE };
static _Atomic int init_state;
static __thread bool tls_initializing TLS_IE;

/* Every allocator lock is taken around fork(), in one order: the
 * instrumentation's (debug, timing), the large cache, the span segments,
 * then the heaps' (shared heaps, pool, segments). Other libraries' handlers that run
 * while they are held may allocate (lock.h). */
static void init_fork_prepare(void)
{
    hooks_fork_prepare();
    large_cache_fork_prepare();
    span_fork_prepare();
    heap_fork_prepare();
    lock_held_for_fork = true;
}

static void init_fork_parent(void)
{
    lock_held_for_fork = false;
    heap_fork_parent();
    span_fork_parent();
    large_cache_fork_parent();
    hooks_fork_parent();
}

static void init_fork_child(void)
{
    lock_held_for_fork = false;
    heap_fork_child();
    large_cache_fork_child();
    span_fork_child();
    background_fork_child();
    hooks_fork_child();
}

void init_ensure(void)
{
    if (likely(atomic_load_explicit(&init_state, memory_order_acquire) == INIT_DONE))
        return;
    if (tls_initializing)
        return;
    int expected = INIT_NONE;
    if (!atomic_compare_exchange_strong(&init_state, &expected, INIT_RUNNING)) {
        while (atomic_load_explicit(&init_state, memory_order_acquire) != INIT_DONE)
            sched_yield();
        return;
    }
    tls_initializing = true;
    segmap_init();           /* before anything can be tagged */
    heap_empty_init();       /* before hooks_update opens malloc's fast path */
    segment_init_secret();
    options_load_env();
    hooks_update();          /* modes from TALLY_OPTIONS; valgrind detection;
                                the medium lane's table before it opens */
    heap_process_init();
    pthread_atfork(init_fork_prepare, init_fork_parent, init_fork_child);
    atomic_store_explicit(&init_state, INIT_DONE, memory_order_release);
    tls_initializing = false;
}

/* If the first malloc came before libc set up environ, read the options
 * again once constructors run. */
__attribute__((constructor(101))) static void init_at_load(void)
{
    init_ensure();
    options_load_env();
    background_update();        /* background=1: libc is ready for threads now */
}

uint64_t init_purge_delay_ms(void) { return option(OPT_PURGE_DELAY); }

bool init_secure(void) { return option(OPT_SECURE) != 0; }

size_t init_large_from(size_t size)
{
    size_t t = init_mmap_threshold();
    return t > SPAN_MIN && !init_secure() && span_open_for(size) ? SPAN_MIN : t;
}

uint8_t init_medium_lane[MEDIUM_MAX >> 10];

/* Every entry above SMALL_MAX from the gates' state (below it the lane
 * never looks); entry k holds the requests of k KiB + 1 .. k + 1 KiB,
 * which all round to the same run. With the gate of 128 KiB runs shut
 * and the others open (git log -p), its 112-128 KiB requests are the
 * lane's and the rest still go to spans. */
void init_lanes_changed(void)
{
    /* last > init_large_from(last), with the options read once (the
     * threshold is above SPAN_MIN whenever spans are on) and each gate
     * once: the 16 entries of a span unit share a run length. Asked per
     * entry, start-up took 20,000 instructions more. */
    _Static_assert(SPAN_UNIT == 16 << 10 && SMALL_MAX < SPAN_MIN, "16 entries a unit");
    size_t t = init_mmap_threshold();
    bool spans = t > SPAN_MIN && !init_secure(), open = false;
    for (size_t k = SMALL_MAX >> 10; k < MEDIUM_MAX >> 10; k++) {
        size_t last = (k + 1) << 10;
        if (k % 16 == 0)
            open = spans && last > SPAN_MIN && span_open_for(last);
        uint8_t e = sizeclass_medium_by_kib[k];
        if (last > t || open)
            e |= INIT_LANE_SPAN;
        __atomic_store_n(&init_medium_lane[k], e, __ATOMIC_RELAXED);
    }
}

size_t init_large_cache_bytes(void) { return (size_t)option(OPT_LARGE_CACHE); }

bool init_purge_batch(void) { return option(OPT_PURGE_BATCH) != 0; }

