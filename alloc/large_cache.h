/*
 * large_cache.h - freed large mappings kept warm for the next large request.
 *
 * Giving every freed large block straight back to the kernel means the next
 * one is faulted in page by page (jemalloc and mimalloc spend most of the
 * malloc-large workload in the kernel that way). A few freed mappings are
 * kept instead, resident; a freed one joins the cached ones next to it in
 * the address space, and large.c splits, glues and grows them with mremap
 * to fit the next request. They are unmapped once unused for
 * LARGE_CACHE_EXPIRE_MS or on malloc_trim. The cache keeps nothing until a
 * large request has followed a large free, and forgets that once emptied
 * by age or malloc_trim: a one-off buffer goes straight back.
 * Bounded by the large_cache option (bytes), so the RSS it holds is too.
 */
#ifndef TALLY_LARGE_CACHE_H
#define TALLY_LARGE_CACHE_H

#include "large_maps.h"

/* Mappings kept at once. Each keeps whatever its blocks touched, so the
 * count bounds RSS as much as the byte limit does. Splitting leaves more,
 * smaller entries: with 8 slots malloc-large evicted them and took 128k
 * faults; 16 took it to 72k at a lower peak (204.5 against 206.5 MiB;
 * 60k once glued mappings moved piece by piece, see os_move_into) and
 * cost mstress 11% more peak RSS (15.1 against 13.7 MiB) for 10% less
 * time, which the cap below takes back. 32 measured the same as 16. */
#define LARGE_CACHE_SLOTS     16
/* Of which at most this many below SEGMENT_SIZE: split tails are whole
 * segments, so this leaves malloc-large as it is and bounds what mstress
 * (its large blocks are 0.5-1 MiB) keeps. 8 first: 13.4 MiB peak against
 * 15.9 with 16, for 7% more time. 12 now: with several threads each
 * holding such blocks, 8 made mstress map and unmap them over and over
 * (3,761 munmap at 4 threads on 2 CPUs); 12 took it from 0.279 to 0.242 s
 * at 2 threads, 0.519 to 0.461 at 4 and 1.17 to 0.98 at 8, for 13.1 ->
 * 15.1, 21.1 -> 22.9 and 36.5 -> 38.4 MiB (glibc about 16, 22 and 34;
 * 16 slots measured slower than 12 and took more). */
#define LARGE_CACHE_SMALL_SLOTS 12
#define LARGE_CACHE_EXPIRE_MS 1000

/* Takes a freed SEGMENT_SIZE-aligned mapping cut as m says: keeps it, or
 * unmaps it when it is more than half the cache. */
HIDDEN void large_cache_put(void *base, size_t size, const struct large_maps *m);
struct large_piece { char *base; size_t size; struct large_maps maps; };

/* Takes cached mappings for a request of `size` bytes into out[]: while
 * those taken add up to less, the one that covers the rest most closely,
 * else the largest, of those that keep the glued whole (one more mapping
 * for the part none of them covers) within LARGE_MAX_MAPS kernel
 * mappings. Returns how many were taken; 0 when none could be, and their
 * sizes add up to less than `size` when the cache or that bound ran out. */
HIDDEN unsigned large_cache_take(size_t size, struct large_piece out[LARGE_CACHE_SLOTS]);
/* Takes the cached mapping that starts at `base` into *out: true when
 * there is one (a block about to grow into it: large.c). */
HIDDEN bool large_cache_take_at(const void *base, struct large_piece *out);
/* Unmaps entries unused for LARGE_CACHE_EXPIRE_MS, or all of them; true
 * when it unmapped any. All of them too when the OS refuses a request
 * (then retried): cached blocks stay charged to the address space limit
 * and the commit limit, and they are the program's freed memory. */
HIDDEN bool large_cache_expire(bool all);
/* Whether the cache holds any entry (one relaxed load): the background
 * thread does not doze while one waits to expire. */
HIDDEN bool large_cache_holds(void);
HIDDEN void large_cache_fork_prepare(void);
HIDDEN void large_cache_fork_parent(void);
HIDDEN void large_cache_fork_child(void);

#endif
