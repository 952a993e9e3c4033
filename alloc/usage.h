/*
 * usage.h - a snapshot of what the allocator holds, derived from page,
 * segment and mapping state when asked (nothing is counted on the fast
 * path). Reads of other threads' pages are racy by design: the numbers are
 * a consistent-enough picture. A block another thread freed counts as
 * allocated until its owner takes it back (transfer buffers, the owner's
 * stacks, another thread's kept lists: remote.h), which an owner that does
 * not allocate, or sleeps, may not do for a long while; malloc_trim()
 * takes back what the calling thread gathered and what parked heaps hold.
 */
#ifndef TALLY_USAGE_H
#define TALLY_USAGE_H

#include "internal.h"
#include "sizeclass.h"
#include "os.h"

struct usage {
    uint64_t segments;          /* live small/medium segments */
    uint64_t segment_bytes;     /* their mapped size */
    uint64_t allocated_bytes;   /* blocks handed out, by class size */
    uint64_t free_blocks;       /* carved blocks waiting on free lists */
    uint64_t page_bytes;        /* bytes of pages assigned to a class */
    uint64_t large_count, large_bytes;
    uint64_t resident_bytes;    /* of segments (mincore), large blocks, cached */
    uint64_t cached_bytes;      /* freed large blocks kept: span units, cache */
    uint64_t class_blocks[NUM_CLASSES];  /* blocks in use per class */
    uint64_t class_pages[NUM_CLASSES];   /* pages assigned per class */
    uint64_t class_slots[NUM_CLASSES];   /* blocks those pages hold when full */
    struct os_counters os;
};

/* with_resident: also ask the kernel which segment pages are resident. */
HIDDEN void usage_read(struct usage *u, bool with_resident);

#endif
