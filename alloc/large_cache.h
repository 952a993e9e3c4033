/*
 * large_cache.h - freed large mappings kept warm for the next large request.
 *
 * Giving every freed large block straight back to the kernel means the next
 * one is faulted in page by page (jemalloc and mimalloc spend most of the
 * malloc-large workload in the kernel that way). A few freed mappings are
 * kept instead, resident; a freed one joins the cached ones next to it in
 * the address space, and large.c splits, glues and grows them with mremap
 * to fit the next request. They are unmapped once they expire (below:
 * purge_delay beyond a warm reserve, LARGE_CACHE_EXPIRE_MS at most) or on
 * malloc_trim. The cache keeps nothing until a
 * large request has followed a large free, or a second large free came,
 * and forgets that once emptied by age or malloc_trim: a one-off buffer
 * goes straight back.
 * Bounded by the large_cache option (bytes), so the RSS it holds is too.
 */
#ifndef TALLY_LARGE_CACHE_H
#define TALLY_LARGE_CACHE_H

#include "large_maps.h"
#include "init.h"

/* Mappings kept at once. Each keeps whatever its blocks touched; the
 * byte limit, the peak rule (large_cache_fit_live) and the expiry bound
 * the RSS they hold. Splitting leaves more, smaller entries: with 8 slots
 * malloc-large evicted them and took 128k faults; 16 took it to 72k.
 * Blocks below a segment each sit in a segment-aligned range of their
 * own, so they never glue into one entry: a server that cycled 100 live
 * 600 KB buffers freed 100 entries a round, and the 12 such entries the
 * cache kept until Dec 4 made it unmap 88 of them every round and fault
 * them in again (docs/benchmarks.md, bufcycle). Blocks under 1 MiB are
 * span runs now (span.h); those of 1-4 MiB still take these slots. */
#define LARGE_CACHE_SLOTS     128
/* Of which at most this many below SEGMENT_SIZE: split tails are whole
 * segments, so a few slots stay for them. */
#define LARGE_CACHE_SMALL_SLOTS 120
/* How long a freed block waits in the cache, or as free span units
 * (span.h): LARGE_CACHE_EXPIRE_MS at most, and purge_delay once its pool
 * holds more than LARGE_WARM_BYTES. A program that frees a batch of big
 * blocks and goes on to other work kept them all resident for the whole
 * second: CPython's json.dumps of 300,000 entries frees 51 buffers of
 * 800 KB (41 MB) as it ends, and json.loads then built its objects in
 * pymalloc's own mappings beside them, 357 MiB of peak RSS against glibc's
 * 316 (whose trim gave them back at once); with the excess going back
 * after purge_delay, 322 MiB, at the same speed (bench/real). A warm
 * reserve still waits the second, for a server's next buffer. */
#define LARGE_CACHE_EXPIRE_MS 1000
#define LARGE_WARM_BYTES      SEGMENT_SIZE

/* Whether a pool's oldest free block, freed at freed_at, goes back at
 * `now` while the pool holds `held` bytes (see above). */
static inline bool large_expired(uint64_t now, uint64_t freed_at, size_t held)
{
    uint64_t age = now - freed_at;
    return age >= LARGE_CACHE_EXPIRE_MS || (held > LARGE_WARM_BYTES && age >= init_purge_delay_ms());
}

/* Whether a pool keeps freed blocks (large_cache.c says why): a request
 * after a free, or a second free, arms it; emptied by age or malloc_trim,
 * it is reset. One for the cache, one for span.c: a program's blocks of
 * 128 KiB-1 MiB say nothing of whether its 8 MiB buffer is a one-off.
 * large_arming_free notes a free and says whether the block is kept. */
struct large_arming { bool freed_one, armed; };
HIDDEN bool large_arming_free(struct large_arming *a);
HIDDEN void large_arming_request(struct large_arming *a);
HIDDEN void large_arming_reset(struct large_arming *a);
/* Takes a freed SEGMENT_SIZE-aligned mapping cut as m says: keeps it, or
 * unmaps it when it is more than the whole cache (the peak rule keeps a
 * block freed after its growth from raising the peak; realloc-M's 64 MiB
 * block, unmapped at over half of it, was faulted in again every round
 * where tcmalloc keeps it). was_live: a block just
 * freed (its size counts toward the live peak), not a piece that was
 * cached already. */
HIDDEN void large_cache_put(void *base, size_t size, const struct large_maps *m, bool was_live);
struct large_piece { char *base; size_t size; struct large_maps maps; };

/* Takes cached mappings for a request of `size` bytes into out[]: while
 * those taken add up to less, the one that covers the rest most closely,
 * else the largest, of those that keep the glued whole (one more mapping
 * for the part none of them covers) within LARGE_MAX_MAPS kernel
 * mappings, and, below a segment, at most twice what is left to cover
 * (such an entry cannot be split). Returns how many were taken; 0 when
 * none could be, and their sizes add up to less than `size` when the
 * cache or that bound ran out. */
HIDDEN unsigned large_cache_take(size_t size, struct large_piece out[LARGE_MAX_MAPS]);
/* Takes the cached mapping that covers `size` bytes most closely into
 * *out, whole (no gluing), of those with at most `cuts` cuts (and, below
 * a segment, at most twice `size`): true when there is one (a block
 * about to grow onto it: large.c). */
HIDDEN bool large_cache_take_covering(size_t size, unsigned cuts, struct large_piece *out);
/* Takes the cached mapping that starts at `base` into *out: true when
 * there is one (a block about to grow into it: large.c). */
HIDDEN bool large_cache_take_at(const void *base, struct large_piece *out);
/* The peak rule: cached bytes plus the live large blocks' bytes (those on
 * mappings of their own: span blocks keep span.h's rule) stay within the
 * most the live ones have reached (since the cache last
 * emptied), so keeping freed blocks never raises the RSS large blocks
 * take above their own peak. Blocks of sizes that differ round to round
 * leave entries no request fits; without the rule they sat resident
 * beside the fresh mappings made instead, up to the byte limit. Called
 * after every large allocation and growing realloc (one relaxed load
 * when the cache is empty): evicts the oldest entries until the rule
 * holds. */
HIDDEN void large_cache_fit_live(void);
/* Unmaps the entries that expired (large_expired), or all of them; true
 * when it unmapped any. All of them too when the OS refuses a request
 * (then retried): cached blocks stay charged to the address space limit
 * and the commit limit, and they are the program's freed memory. */
HIDDEN bool large_cache_expire(bool all);
/* Bytes of the cached mappings (one relaxed load; the statistics). */
HIDDEN size_t large_cache_bytes(void);
/* Whether the cache holds any entry (one relaxed load): the background
 * thread does not doze while one waits to expire. */
HIDDEN bool large_cache_holds(void);
HIDDEN void large_cache_fork_prepare(void);
HIDDEN void large_cache_fork_parent(void);
HIDDEN void large_cache_fork_child(void);

#endif
