/*
 * page.h - one size class inside one page: its free list, how it grows, and
 * the doubly linked queues a heap keeps pages on.
 *
 * A page is carved lazily: `reserved` blocks have been threaded onto the
 * free list so far, at most about one OS page's worth at a time, so a fresh
 * page costs RSS only as it is used.
 */
#ifndef TALLY_PAGE_H
#define TALLY_PAGE_H

#include "segment.h"

struct page_queue { struct page *first, *last; };

HIDDEN void page_init(struct segment *s, struct page *pg, unsigned cls);
HIDDEN struct block *page_extend(struct page *pg);
HIDDEN void page_queue_push(struct page_queue *q, struct page *pg);
HIDDEN void page_queue_remove(struct page_queue *q, struct page *pg);

static inline bool page_has_room(const struct page *pg)
{
    return pg->free != NULL || pg->reserved < pg->capacity || pg->held;
}

/* Partial purge of a live small page: hands back every OS page whose
 * blocks are all free, taking those blocks off the free list until the
 * page runs dry (page_extend then brings them back). Precondition: pg is
 * not a heap's current page. (os.c counts the bytes purged.) */
HIDDEN void page_purge_free_runs(struct page *pg);

/* A page reused for another class: hands back what earlier classes carved
 * beyond this class's reach. */
HIDDEN void page_purge_tail(struct page *pg);
/* Medium pages: hands back the OS pages inside each free block, keeping
 * the page that holds its link; the block stays on the free list and comes
 * back zero-filled. A mark in the block's second word avoids repeating
 * the work. */
HIDDEN void page_purge_free_blocks(struct page *pg);

/* Pops a block; the caller has checked page_has_room(). */
static inline struct block *page_pop(struct page *pg)
{
    struct block *b = pg->free;
    if (likely(b != NULL)) {
        pg->free = block_next(b);
        pg->used++;
        return b;
    }
    return page_extend(pg);
}

#endif
