/*
 * large.h - blocks above the mmap threshold: a run of a span segment up
 * to SPAN_MAX (span.h), one mapping each above it.
 *
 * Layout: the mapping starts at an address aligned to max(SEGMENT_SIZE,
 * alignment) with a struct large_header; the block starts `offset` bytes
 * in (128, or the requested alignment). The segmap tags the mapping's first
 * 4 MiB TAG_LARGE and the rest TAG_LARGE_TAIL, so free() of any pointer
 * finds the header by walking back, and realloc() moves the pages with
 * mremap instead of copying them. A span block's header starts its run
 * instead (span.h), and its segment is tagged TAG_LARGE whole.
 */
#ifndef TALLY_LARGE_H
#define TALLY_LARGE_H

#include "internal.h"

#define LARGE_DEBUG 0x1   /* carries a debug header in front of the block */
#define LARGE_GUARD 0x2   /* secure mode: the mapping ends in a PROT_NONE page */
#define LARGE_SPAN  0x4   /* a run of a shared span segment (span.h), no mapping */
/* Grown by realloc (from a class block, or a span block once): a span
 * block that grows again to SPAN_REGROW_MAX or more leaves for a mapping
 * of its own. */
#define LARGE_GROWN 0x8
#define LARGE_ZERO  0x100 /* large_alloc: the block must read as zero */

/* NULL when the OS refuses; a fresh mapping reads as zero. `front` bytes
 * before the returned block are reserved for the caller (debug header). */
HIDDEN void *large_alloc(size_t size, size_t align, size_t front, unsigned flags);
/* The flags of the live large block starting at p (0 if not one). */
HIDDEN unsigned large_flags(const void *p);
/* Frees the large block p, unless it has one of the flags `refuse`
 * (LARGE_DEBUG, or 0): false then, with nothing freed (one lookup of the
 * block for both). Aborts through diag_fail() on a pointer that is not a
 * live large block. */
HIDDEN bool large_free(void *p, const char *func, unsigned refuse);
/* Resizes in place or by moving pages; NULL (p intact) on failure. */
HIDDEN void *large_realloc(void *p, size_t size);
HIDDEN size_t large_usable_size(const void *p, const char *func);
HIDDEN void large_counters(uint64_t *count, uint64_t *bytes);
/* Bytes of live blocks on mappings of their own (not span runs). */
HIDDEN size_t large_mapped_live(void);
/* Gives back what the large cache and the span segments hold past their
 * expiry (large_cache.h), or all of it; true when either gave any back.
 * Both always: a sweep, and an allocation the OS refused, want both. */
HIDDEN bool large_expire(bool all);

#endif
