/*
 * span_keep.h - a thread's last few freed span runs, kept for its next
 * span request of the same run size without the span lock.
 *
 * Every span block takes its arena's span lock twice, once to take its
 * run and once to give it back, and two threads each replacing live
 * blocks of 64-128 KiB at random spent their time waiting on the one lock
 * there was (0.60 s against glibc's 0.48, which gives each thread an
 * arena; span.c has arenas since, and threads that share one still
 * wait). Here a freed run of up
 * to SPAN_KEEP_MAX stays with the thread that freed it, still live as far
 * as span.c knows, and that thread's next request whose run is the same
 * number of units takes it back (jemalloc's and tcmalloc's thread caches
 * do the same for their large classes). A kept run is resident memory no
 * block uses, so there are SPAN_KEEP_RUNS of them at most, and the heap's
 * sweep gives back those no request took since the last sweep (they go
 * to span_give, which keeps or purges them by its own rules), as do the
 * other threads' sweeps every 100 ms (a thread whose requests are all
 * large never sweeps its heap); a thread's exit and malloc_trim give back
 * all.
 *
 * Only the owning thread puts and takes; a sweep may run on another
 * thread (heap_trim_other), so each slot is one atomic word, and whoever
 * swaps a run out of it owns it.
 */
#ifndef TALLY_SPAN_KEEP_H
#define TALLY_SPAN_KEEP_H

#include "internal.h"

#include <stdatomic.h>

#define SPAN_KEEP_RUNS 4
#define SPAN_KEEP_MAX  ((size_t)256 << 10)

struct span_keep {
    /* The run's address | its units - 1 | SPAN_KEEP_SEEN, or 0. */
    _Atomic(uintptr_t) run[SPAN_KEEP_RUNS];
    unsigned next;              /* the slot a full keep gives back next */
};

/* Sets the calling thread's keep: its heap's, from heap_life.c while the
 * thread has one; NULL before and after. */
HIDDEN void span_keep_bind(struct span_keep *k);
/* Keeps the freed run of `bytes` at `run` in the caller's keep, giving
 * back what it replaces; false when it is not for keeping (the caller
 * gives it back). */
HIDDEN bool span_keep_put(void *run, size_t bytes);
/* A kept run of exactly `bytes` (whole units), or NULL. Its block header
 * slot is span_header_at(run): the run is still live in its segment. */
HIDDEN void *span_keep_take(size_t bytes);
/* Gives back k's runs that stayed unused since the last sweep (all of
 * them when `all`), marking the others seen. */
HIDDEN void span_keep_sweep(struct span_keep *k, bool all);

#endif
