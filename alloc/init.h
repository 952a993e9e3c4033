/*
 * init.h - process start-up (lazy, allocation-free) and fork handlers.
 */
#ifndef TALLY_INIT_H
#define TALLY_INIT_H

#include "internal.h"
#include "sizeclass.h"
#include "../instrument/options.h"

/* Runs start-up once; cheap when done. Safe to re-enter from start-up. */
HIDDEN void init_ensure(void);
HIDDEN uint64_t init_purge_delay_ms(void);
HIDDEN size_t init_large_cache_bytes(void);
HIDDEN bool init_purge_batch(void);
HIDDEN bool init_secure(void);

/* Requests above it get a mapping of their own: the mmap_threshold option,
 * held to SMALL_MAX..MEDIUM_MAX. Inline: malloc's medium lane tests it. */
static inline size_t init_mmap_threshold(void)
{
    size_t t = (size_t)option(OPT_MMAP_THRESHOLD);
    return t < SMALL_MAX ? SMALL_MAX : t > MEDIUM_MAX ? MEDIUM_MAX : t;
}

/* Requests of `size` bytes above it are large blocks (large.h): the mmap
 * threshold, or SPAN_MIN below it while spans take requests of that size
 * (their gate is open: span.h), unless secure mode puts a guard page
 * behind every large block. */
HIDDEN size_t init_large_from(size_t size);

/* malloc's medium lane, by the KiB a request reaches into (as
 * sizeclass_medium_by_kib): the class, or INIT_LANE_SPAN set where the
 * size is a span block's (init_large_from), which the lane leaves to the
 * slow path. Relaxed loads and stores: a lane that reads an entry a gate
 * move late takes a block of the right class or the slow path, both
 * right. */
#define INIT_LANE_SPAN 0x80
extern HIDDEN uint8_t init_medium_lane[MEDIUM_MAX >> 10];

/* The lane's entry for `size`. Precondition: SMALL_MAX < size <= MEDIUM_MAX. */
static inline unsigned init_lane_entry(size_t size)
{
    return __atomic_load_n(&init_medium_lane[(size - 1) >> 10], __ATOMIC_RELAXED);
}
/* A span gate moved (span.c): the lane's entries follow init_large_from. */
HIDDEN void init_lanes_changed(void);

/* Provided by heap_life.c for start-up. */
HIDDEN void heap_empty_init(void);
HIDDEN void heap_process_init(void);

#endif
