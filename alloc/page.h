/*
 * page.h - one size class inside one page: its free list, how it grows, and
 * the doubly linked queues a heap keeps pages on.
 *
 * A page is carved lazily, a run at a time: `reserved` blocks have been
 * carved so far. A run is not threaded onto the free list (that would
 * write into memory nobody has touched yet, taking its page faults inside
 * malloc); its blocks go out one after the other from the page's fresh
 * run, untouched, straight from malloc's fast path once its list is empty.
 * So a fresh page costs RSS only as it is used, and malloc never writes a
 * block it has not handed out before.
 */
#ifndef TALLY_PAGE_H
#define TALLY_PAGE_H

#include "segment.h"

struct page_queue { struct page *first, *last; };

HIDDEN void page_init(struct segment *s, struct page *pg, unsigned cls);
HIDDEN struct block *page_extend(struct page *pg);
/* The last block page_extend handed out on this thread from memory
 * nothing has written since it was mapped or purged: zero, whatever the
 * class. raw_calloc clears it, allocates, and skips the memset when the
 * block it got is this one (a calloc of 500 KB faulted in all 128 of its
 * pages to clear them; git commit callocs two). */
extern HIDDEN __thread void *page_zero_block TLS_IE;
HIDDEN void page_queue_push(struct page_queue *q, struct page *pg);
/* At the front (of a retired list: its oldest end, purged first). */
HIDDEN void page_queue_push_front(struct page_queue *q, struct page *pg);
HIDDEN void page_queue_remove(struct page_queue *q, struct page *pg);

/* Whether pg's fresh run has a block left. */
static inline bool page_has_fresh(const struct page *pg)
{
    return pg->fresh < pg->fresh_end;
}

/* Whether pg has memory left to carve: its fresh run, or area not yet
 * reserved (a page carved an OS page at a time). */
static inline bool page_can_carve(const struct page *pg)
{
    return page_has_fresh(pg) || pg->reserved < pg->capacity;
}

/* The next block of pg's fresh run, counted as used. Precondition:
 * page_has_fresh(pg). */
static inline struct block *page_take_fresh(struct page *pg)
{
    uint32_t off = pg->fresh;
    pg->fresh = off + pg->fresh_size;
    pg->used++;
    return (struct block *)(((uintptr_t)pg & ~SEGMENT_MASK) + off);
}

static inline bool page_has_room(const struct page *pg)
{
    return pg->free != NULL || page_can_carve(pg) || pg->held;
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
 * back zero-filled. Unless at_once, only blocks an earlier call saw free
 * go back; the others are marked seen: a block goes back once it stayed
 * free from one look to the next. A mark in the block's second word
 * records either; a free clears it (page_medium_freed). Returns whether
 * it left any block marked seen, to go back at the next look. */
HIDDEN bool page_purge_free_blocks(struct page *pg, bool at_once);

/* A medium block b of pg is coming back: the sweep must look at pg again.
 * A medium page goes on handing out blocks while it is current after its
 * free blocks were purged, and a block taken and freed between two sweeps
 * leaves `used` where the purge left it: `swept_used` alone never saw it
 * (8 blocks of 400 KB reused and freed stayed resident for good). Before
 * the push: once the count drops, the page may be gone. */
static inline void page_medium_freed(struct page *pg, struct block *b)
{
    pg->swept_used = UINT32_MAX;
    /* And b's purge mark goes (page_purge_free_blocks): it stayed on a
     * block handed out again to a caller that never wrote the block's
     * second word (a buffer filled from byte 16 on), and the sweep skipped
     * that block for good, however much of it was written. */
    ((uintptr_t *)b)[1] = 0;
}

/* The head of pg's free list, popped and counted as used, or NULL. */
static ALWAYS_INLINE struct block *page_try_pop(struct page *pg)
{
    struct block *b = pg->free;
    if (likely(b != NULL)) {
        pg->free = block_next(b);
        pg->used++;
    }
    return b;
}

/* Puts b, a block of pg in use, back on pg's list: the owner's free. The
 * count goes last and nothing of pg is touched after it: once it reads 0,
 * another thread's trim may give the page back, and its segment with it
 * when that was the segment's last page (heap.c, heap_trim_other). So
 * the decrement is a release: on x86, whose stores stay in order, a
 * compiler fence is enough (no instruction; without it GCC put the list
 * store after the decrement, in free); elsewhere a release store. */
static ALWAYS_INLINE void page_push_block(struct page *pg, struct block *b)
{
    block_set_next(b, pg->free);
    pg->free = b;
#if defined(__x86_64__) || defined(__i386__)
    __atomic_signal_fence(__ATOMIC_RELEASE);
    pg->used--;
#else
    __atomic_store_n(&pg->used, pg->used - 1, __ATOMIC_RELEASE);
#endif
}

/* Pops a block; the caller has checked page_has_room(). */
static inline struct block *page_pop(struct page *pg)
{
    struct block *b = page_try_pop(pg);
    return likely(b != NULL) ? b : page_extend(pg);
}

#endif
