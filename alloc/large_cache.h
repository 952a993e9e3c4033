/*
 * large_cache.h - freed large mappings kept warm for the next large request.
 *
 * Giving every freed large block straight back to the kernel means the next
 * one is faulted in page by page (jemalloc and mimalloc spend most of the
 * malloc-large workload in the kernel that way). A few freed mappings are
 * kept instead, resident, and resized with mremap to fit the next request;
 * they are unmapped once unused for LARGE_CACHE_EXPIRE_MS or on malloc_trim.
 * Bounded by the large_cache option (bytes), so the RSS it holds is too.
 */
#ifndef TALLY_LARGE_CACHE_H
#define TALLY_LARGE_CACHE_H

#include "internal.h"

/* Mappings kept at once. Each keeps whatever its blocks touched, so the
 * count bounds RSS as much as the byte limit does: 8 against 32 took
 * malloc-large's peak from 240 to 212-217 MiB (glibc 201) and mstress's
 * from 20.3 to 18.1-18.9 MiB, for 11-18% and 4-5% more time. */
#define LARGE_CACHE_SLOTS     8
#define LARGE_CACHE_EXPIRE_MS 1000

/* Keeps a freed SEGMENT_SIZE-aligned mapping; false when it is not kept
 * (the caller unmaps it). */
HIDDEN bool large_cache_put(void *base, size_t size);
/* The cached mapping whose size is closest to `size` (larger preferred),
 * its size in *got; NULL when the cache is empty. */
HIDDEN void *large_cache_take(size_t size, size_t *got);
/* Unmaps entries unused for LARGE_CACHE_EXPIRE_MS, or all of them. */
HIDDEN void large_cache_expire(bool all);
HIDDEN void large_cache_fork_prepare(void);
HIDDEN void large_cache_fork_parent(void);
HIDDEN void large_cache_fork_child(void);

#endif
