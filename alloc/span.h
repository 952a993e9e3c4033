/*
 * span.h - large blocks under 1 MiB (grown, up to half a segment), and
 * while their size's gate is open those above 32 KiB, carved from shared
 * span segments in 16 KiB units.
 *
 * A block of 512 KiB-2 MiB on a mapping of its own sat alone in a 4 MiB
 * aligned range (the segmap tags 4 MiB at a time), so two freed ones
 * never join, a freed one serves only a request of about its size, and
 * a round of buffers of sizes that differ from the last round's faulted
 * most of its pages in afresh (bufcycle: 6,000 faults a round against
 * tcmalloc's 600). Here such blocks are runs of units in segments the
 * threads share (in a few arenas, span.c): freed runs join their free
 * neighbours where they lie,
 * and the next request of any size takes the resident units first, so a
 * round reuses the last one's pages whatever their sizes (tcmalloc's and
 * mimalloc's spans do the same).
 *
 * Layout: a span segment is SEGMENT_SIZE bytes at an aligned address,
 * tagged TAG_LARGE; its header (struct span_segment, span.c) sits in
 * unit 0, which holds no block, and keeps each run's block header
 * (struct large_header, large.c) in a slot of its own, out of band: a
 * header in front of the block made malloc write, and fault in, the
 * block's first page (latency-touch's median malloc(500000) went from
 * 0.22 to 11 us, a fault inside malloc). A block starts less than a unit
 * past its run's start (at it, unless aligned or with a debug header in
 * front), so a pointer's unit is its run's.
 *
 * Freed units stay resident for the next request when the program reuses
 * large blocks (the large cache's arming rule, an arming of their own:
 * large_cache.h) and are purged once they expire (large_expired: beyond a
 * warm reserve per arena after purge_delay, all of them after
 * LARGE_CACHE_EXPIRE_MS), on malloc_trim, or by the peak rule: the units
 * resident and free plus those live stay within the most that were live
 * since none was cached, and a sixteenth, or a segment's worth when that
 * is more (span.c says why).
 */
#ifndef TALLY_SPAN_H
#define TALLY_SPAN_H

#include "internal.h"

/* 16 KiB units: a run rounds a block up to whole units, and once the
 * units served another block the rounding is resident too. With 64 KiB
 * units, 500 live buffers of 128-512 KiB (bufregrow) held 15 MiB more in
 * runs than they asked for, and peaked at 164 MiB against glibc's 142. */
#define SPAN_UNIT_SHIFT 14
#define SPAN_UNIT       ((size_t)1 << SPAN_UNIT_SHIFT)
#define SPAN_UNITS      (SEGMENT_SIZE / SPAN_UNIT)     /* 256, unit 0 the header's */
/* A 2 MiB request and its header: half a segment and a unit, so the rest
 * of that segment still serves smaller blocks. A span block grows (with
 * realloc) in its segment or by a copy up to this; past it, it is copied
 * into a mapping of its own, which grows with mremap. */
#define SPAN_MAX_UNITS  (SPAN_UNITS / 2 + 1)
#define SPAN_MAX        (SPAN_MAX_UNITS * SPAN_UNIT)
/* A new block (malloc, or a class block realloc grows) takes a span when
 * smaller than this (and aligned to at most a unit): a request of 1 MiB
 * or more maps its own, so that a buffer grown from there on moves pages
 * with mremap and never copies (realloc-m grows 1 MiB to 64 MiB
 * untouched: copying its 2 MiB out of a span faulted both copies in,
 * 0.031 s against 0.0076). */
#define SPAN_NEW_MAX    ((size_t)1 << 20)
/* A span block that grew before grows again within spans while its new
 * run stays below this; from here on it moves to a mapping (large.c).
 * Mapping every second growth gave a server's 500 live buffers, each
 * grown 70 -> 140 -> 280 KB, a 4 MiB-aligned mapping apiece (an mmap and
 * two trims) and fresh pages each round, while the runs they left stayed
 * cached: 91 ms and 245 MiB of peak a round against glibc's 75 ms and 139
 * MiB. In spans, each block's new run takes the units its neighbours
 * vacated: 38 ms and 200 MiB. A buffer doubling past it (bufgrow) still
 * copies at most 256 KiB on its way to a mapping. */
#define SPAN_REGROW_MAX ((size_t)512 << 10)
/* While their gate is open (span_open_for), requests above this, below the mmap
 * threshold too, are span blocks instead of medium blocks: medium blocks
 * of 64-512 KiB live in their classes' pages, so a freed one serves only
 * its class, and a server's buffers of sizes that differ round to round
 * faulted in most of a round afresh (bufcycle: 0.41 s and 76.6 MiB
 * against 0.20 s and 65 MiB this way; tcmalloc 0.207 s). From 128 KiB
 * down to 64: 500 live buffers of 32-128 KiB grown twice (bufregrow)
 * 0.32 -> 0.26 s and 221 -> 183 MiB, since the first growth's freed
 * blocks now serve the second; 1,000 live 65-80 KB blocks replaced at
 * random 4.55 -> 4.30 us an op at 90 -> 82 MiB (glibc 79), once a take
 * needed no mincore (span.c's res[]). Down to 32 KiB once units were 16
 * KiB and threads kept their freed runs (span_keep.h): bufregrow 0.25 ->
 * 0.236 s and 170 -> 156 MiB (glibc 150), and two threads replacing
 * 32-64 KiB blocks at random 17 -> 11 MiB of peak RSS, 0.38 -> 0.42 s
 * (glibc 0.46 s, 9 MiB): a class block takes no lock. A run rounds a
 * block up to whole units, but a unit past what blocks write stays
 * untouched. */
#define SPAN_MIN        ((size_t)32 << 10)

/* Bytes of a run's header slot. */
#define SPAN_HEADER     48

/* The bytes of the run that holds `bytes`: whole units. */
static inline size_t span_run_size(size_t bytes) { return align_up(bytes, SPAN_UNIT); }

/* A run of span_run_size(bytes) <= SPAN_MAX bytes, resident units first,
 * and in *hdr its header slot (SPAN_HEADER bytes); NULL when the OS
 * refuses a segment. [clear_from, clear_to) of the run reads as zero (the
 * rest as whatever was there). */
HIDDEN void *span_take(size_t bytes, size_t clear_from, size_t clear_to, void **hdr);
/* Frees the run of `bytes` at `run`. */
HIDDEN void span_give(void *run, size_t bytes);
/* Resizes the run at `run` from old_bytes to new_bytes where it lies:
 * a shrink always does; a growth when the units after it are free, and,
 * when some of those would fault, no resident run elsewhere could take
 * the whole block instead (a copy costs 0.3 us a page, a fault 11.5).
 * False when the caller must move the block. */
HIDDEN bool span_resize(void *run, size_t old_bytes, size_t new_bytes);
/* The gate of requests of `size` bytes (one per run length): whether
 * freed span blocks of their run's length have been written densely
 * enough to be worth reusing at other offsets (span.c says why); each
 * starts open. span_wanted: it is open, or, shut, one request in 16
 * still comes (so a size that turns dense is noticed). When one moves,
 * span.c calls init_lanes_changed (malloc's medium lane follows it). */
HIDDEN bool span_open_for(size_t size);
HIDDEN bool span_wanted(size_t size);
/* The calling thread takes its runs from the arena of heap `tag` (span.c):
 * called when a thread gets a heap. */
HIDDEN void span_arena_bind(unsigned tag);
/* Whether a thread waited for the span lock lately (span.c). */
HIDDEN bool span_busy(void);
/* Whether seg, a segment tagged TAG_LARGE, is a span segment. */
HIDDEN bool span_is_segment(const void *seg);
/* The header slot of the live run p's unit begins, or NULL: p lies in a
 * span segment (span_is_segment). Reads no lock: a valid p's run was
 * taken before p was handed out. */
HIDDEN void *span_header_at(const void *p);
/* The run whose header slot is hdr. */
HIDDEN void *span_run_of(const void *hdr);
/* Purges the free units that expired (large_expired; all of them when
 * `all`) and unmaps segments left with no live run once unused for
 * LARGE_CACHE_EXPIRE_MS; true when it gave any back. */
HIDDEN bool span_expire(bool all);
/* Bytes of free units written since they were mapped or purged: kept
 * resident for the next request (the statistics). */
HIDDEN size_t span_cached_bytes(void);
/* Whether free units are resident (one relaxed load): the background
 * thread does not doze while some wait to expire. */
HIDDEN bool span_holds(void);
HIDDEN void span_fork_prepare(void);
HIDDEN void span_fork_parent(void);
HIDDEN void span_fork_child(void);

#endif
