/*
 * os.h - the only door to the kernel's memory calls.
 *
 * Contract (every caller relies on exactly this):
 *   - os_map() returns zeroed, readable and writable memory aligned to
 *     OS_PAGE, or NULL; it never sets errno visibly to callers' concern.
 *   - os_map_aligned() additionally aligns the start to `align` (a power of
 *     two >= OS_PAGE) and leaves no extra mapping behind.
 *   - os_map() and os_reserve_aligned_at() map address space only
 *     (MAP_NORESERVE): tally's own metadata and segments, touched as
 *     they are used. os_map_aligned() and os_remap_aligned() are for
 *     blocks handed to the program, and are charged to the commit limit
 *     as glibc's mappings are: a request the kernel could never back
 *     (16 TiB on a 24 GiB machine) fails with ENOMEM instead of
 *     succeeding and getting the process killed when it is touched.
 *   - os_purge() keeps the range mapped but hands its frames back; the range
 *     reads as zero afterwards (MADV_DONTNEED semantics): at once, or
 *     inside a batch (below) once the batch is flushed.
 *   - os_remap_aligned() resizes a mapping that starts at an `align`-aligned
 *     address, keeping that alignment. The range may span several kernel
 *     mappings, the last starting `last` bytes in; that one grows in place
 *     when it can. Else the pages move to a fresh range: in one call when
 *     the range is one mapping (the result is one too), piece by piece
 *     with os_move_into (below) when `split` allows the new part to be
 *     one mapping more, else by copying into the fresh range (one
 *     mapping). *how says which. NULL, with the old mapping untouched,
 *     only when no range can be had.
 *   - os_move_into() moves the pages of [p, p + size) (page tables, not
 *     bytes) onto [dst, dst + size), a range of a mapping of tally's own,
 *     replacing what was there; p's range may span several kernel
 *     mappings. It never fails: what the kernel will not move is copied
 *     when `keep` says the contents matter, else dropped (dst keeps its
 *     own zero pages there). Either way p's range is unmapped.
 *   - os_fail_after(n) makes the n-th next map/remap call fail (tests only;
 *     n = 0 switches injection off).
 * Counters are updated on every call for the stats layer.
 */
#ifndef TALLY_OS_H
#define TALLY_OS_H

#include "internal.h"

#include <stdatomic.h>
#include <string.h>

enum os_call { OS_MMAP, OS_MUNMAP, OS_MREMAP, OS_MADVISE, OS_CALLS };

struct os_counters {
    uint64_t calls[OS_CALLS];
    uint64_t ns[OS_CALLS];      /* time inside each call, while timed */
    uint64_t mapped_bytes;      /* currently mapped by tally */
    uint64_t purged_bytes;      /* total handed back with os_purge */
};

/* When set (timing mode), every call's duration is added to ns[]. */
extern HIDDEN bool os_time_calls;

HIDDEN void *os_map(size_t size);
/* Address space for tally's own tables (the segment map), zeroed like
 * os_map's but not counted in mapped_bytes (it is no heap memory) and
 * never refused by the failure-injection hook: start-up has no way to
 * fail softly. */
HIDDEN void *os_map_table(size_t size);
HIDDEN void *os_map_aligned(size_t size, size_t align);
/* Aligned address space, trying `hint` first (an address the caller
 * expects to be free and aligned: one call instead of three when it is). */
HIDDEN void *os_reserve_aligned_at(void *hint, size_t size, size_t align);
HIDDEN void  os_unmap(void *p, size_t size);
HIDDEN void  os_purge(void *p, size_t size);
/* Between open and close, this thread's os_purge() calls are gathered and
 * handed to the kernel together (os.c says why): at close, when
 * OS_PURGE_BATCH are waiting, and at os_purge_flush(), which a caller
 * must reach before memory it purged can pass to another thread or back
 * to the kernel (segment_free does). Nested opens join the outer batch. */
#define OS_PURGE_BATCH 32
struct os_range { void *p; size_t size; };
struct os_purge_batch { unsigned n; struct os_range r[OS_PURGE_BATCH]; };
HIDDEN void  os_purge_batch_open(struct os_purge_batch *b);
HIDDEN void  os_purge_flush(void);
HIDDEN void  os_purge_batch_close(struct os_purge_batch *b);
/* How os_remap_aligned resized: the result is laid out as before (in
 * place), is one kernel mapping, or is the old pieces plus the new part. */
enum os_remap_how { OS_REMAP_IN_PLACE, OS_REMAP_ONE, OS_REMAP_PIECES };
HIDDEN void *os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align,
                              size_t last, bool split, enum os_remap_how *how);
HIDDEN void  os_move_into(void *p, size_t size, void *dst, bool keep);
/* Grows [p, p + old_size), whose last kernel mapping starts `last` bytes
 * in, to new_size where it is: true when the address space after it was
 * free (the new part reads as zero), false with nothing changed. */
HIDDEN bool  os_grow_in_place(void *p, size_t old_size, size_t new_size, size_t last);
/* Under valgrind's memcheck: tells it that tally is taking [p, p + size)
 * back as its own memory (fresh page carving, a reused mapping's header),
 * so earlier freed blocks' no-access marks do not cover tally's metadata.
 * Outside valgrind it is a handful of no-op instructions on slow paths. */
HIDDEN void os_mark_defined(void *p, size_t size);
/* Makes [p, p + size) inaccessible (guard) or readable and writable again. */
HIDDEN void os_protect(void *p, size_t size, bool guard);
HIDDEN void  os_fail_after(long n);
HIDDEN void  os_counters_read(struct os_counters *out);

/* Milliseconds on a cheap monotonic clock (vDSO, coarse): purge timing;
 * and nanoseconds (timing mode). os_clock.c. */
HIDDEN uint64_t os_now_ms(void);
HIDDEN uint64_t os_now_ns(void);
/* Sleeps up to `ms` unless *word no longer reads `seen`, or until
 * os_wake(word), which bumps *word first (os_clock.c). A signal or a
 * spurious wake-up returns early: callers loop. */
HIDDEN void os_wait_ms(_Atomic uint32_t *word, uint32_t seen, uint64_t ms);
HIDDEN void os_wake(_Atomic uint32_t *word);
/* Clears [p, p + size), memory the caller owns in a private anonymous
 * mapping of tally's, for calloc. A range of OS_ZERO_PROBE_MIN or more
 * goes to os_zero_written: only its pages written since they were mapped
 * or purged are cleared (those /proc/self/pagemap calls present or
 * swapped; the rest read as zero already), so a reused block clears what
 * its last owners wrote, not pages nobody touched. A shorter one is a
 * plain memset, here: the probe's three calls cost more than the
 * clearing, and its code lies with the large blocks' (WARM_TEXT). So is
 * any range under valgrind, or once pagemap cannot be read or believed. */
#define OS_ZERO_PROBE_MIN ((size_t)256 << 10)
HIDDEN void os_zero_written(void *p, size_t size);
static inline void os_zero(void *p, size_t size)
{
    if (size < OS_ZERO_PROBE_MIN)
        memset(p, 0, size);
    else
        os_zero_written(p, size);
}
/* Bytes of [p, p + size) resident in RAM (mincore): statistics, and the
 * span gate's measure (span.c). */
HIDDEN size_t os_resident(void *p, size_t size);
/* The same, and in counts[i] the pages resident in the i-th `chunk`
 * bytes (chunk a multiple of OS_PAGE, at most 255 pages; size a multiple
 * of chunk). */
HIDDEN size_t os_resident_per(void *p, size_t size, size_t chunk, uint8_t *counts);


#endif
