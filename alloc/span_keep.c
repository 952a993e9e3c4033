/*
 * span_keep.c - a thread's kept span runs (span_keep.h): four atomic
 * slots in its heap, each a run's address with its length in units.
 */
#include "span_keep.h"
#include "span.h"

#define SPAN_KEEP_UNITS ((uintptr_t)0xff)    /* units - 1: runs up to 256 units */
#define SPAN_KEEP_SEEN  ((uintptr_t)0x100)   /* a sweep saw it kept */
_Static_assert(SPAN_UNIT > (SPAN_KEEP_SEEN << 1), "a run's address leaves the low bits free");
_Static_assert((SPAN_KEEP_MAX >> SPAN_UNIT_SHIFT) <= SPAN_KEEP_UNITS + 1, "units fit their bits");

static __thread struct span_keep *tls_keep TLS_IE;

HOT_TEXT void span_keep_bind(struct span_keep *k) { tls_keep = k; }

static void keep_give(uintptr_t v)
{
    span_give((void *)(v & ~(SPAN_UNIT - 1)), ((v & SPAN_KEEP_UNITS) + 1) << SPAN_UNIT_SHIFT);
}

bool span_keep_put(void *run, size_t bytes)
{
    struct span_keep *k = tls_keep;
    if (!k || bytes > SPAN_KEEP_MAX || !span_busy())
        return false;
    uintptr_t v = (uintptr_t)run | ((bytes >> SPAN_UNIT_SHIFT) - 1);
    for (unsigned i = 0; i < SPAN_KEEP_RUNS; i++) {
        if (atomic_load_explicit(&k->run[i], memory_order_relaxed) == 0) {
            atomic_store_explicit(&k->run[i], v, memory_order_release);
            return true;
        }
    }
    /* Full: the oldest put goes back, round robin. */
    unsigned i = k->next++ % SPAN_KEEP_RUNS;
    uintptr_t old = atomic_exchange_explicit(&k->run[i], v, memory_order_acq_rel);
    if (old)
        keep_give(old);
    return true;
}

void *span_keep_take(size_t bytes)
{
    struct span_keep *k = tls_keep;
    if (!k || bytes > SPAN_KEEP_MAX)
        return NULL;
    uintptr_t units = (bytes >> SPAN_UNIT_SHIFT) - 1;
    for (unsigned i = 0; i < SPAN_KEEP_RUNS; i++) {
        uintptr_t v = atomic_load_explicit(&k->run[i], memory_order_relaxed);
        if (v && (v & SPAN_KEEP_UNITS) == units &&
            atomic_compare_exchange_strong_explicit(&k->run[i], &v, 0, memory_order_acq_rel,
                                                    memory_order_relaxed))
            return (void *)(v & ~(SPAN_UNIT - 1));
    }
    return NULL;
}

HOT_TEXT void span_keep_sweep(struct span_keep *k, bool all)
{
    for (unsigned i = 0; i < SPAN_KEEP_RUNS; i++) {
        uintptr_t v = atomic_load_explicit(&k->run[i], memory_order_relaxed);
        if (!v)
            continue;
        if (all || (v & SPAN_KEEP_SEEN)) {
            if (atomic_compare_exchange_strong_explicit(&k->run[i], &v, 0, memory_order_acq_rel,
                                                        memory_order_relaxed))
                keep_give(v);
        } else {
            atomic_compare_exchange_strong_explicit(&k->run[i], &v, v | SPAN_KEEP_SEEN,
                                                    memory_order_acq_rel, memory_order_relaxed);
        }
    }
}
