/*
 * raw.c - size dispatch (class, aligned class, or large mapping), pointer
 * validation, realloc policy: the allocator below the public entry points.
 */
#include "raw.h"
#include "heap.h"
#include "remote.h"
#include "large.h"
#include "large_cache.h"
#include "span.h"
#include "init.h"
#include "diag.h"
#include "os.h"

#include <string.h>

/* exact: see heap_alloc_slow. */
static void *alloc_in_class_once(unsigned cls, bool exact)
{
    struct heap *h = heap_get();
    return h ? heap_alloc(h, cls, exact) : heap_alloc_shared(SHARED_ORPHAN, cls, exact);
}

/* When the OS refuses a segment, the large cache and the span segments'
 * free units give way (large_cache.h, span.h) and the heap tries once
 * more; here, not in the heap, since a shared heap's lock must not be
 * held while the cache's or the spans' is taken (fork takes those
 * first). */
static void *alloc_in_class(unsigned cls, bool exact)
{
    void *p = alloc_in_class_once(cls, exact);
    if (unlikely(!p) && large_expire(true))
        p = alloc_in_class_once(cls, exact);
    return p;
}

/* A thread whose requests are all large has no heap, and so no keep for
 * the span runs it frees (span_keep.h): eight threads replacing blocks
 * of 32-64 KiB, span blocks all, kept none. While threads wait for the
 * span lock, such a thread takes one. */
static void *large_alloc_keeping(size_t size, unsigned flags)
{
    if (unlikely(span_busy()) && tls_heap == &heap_empty)
        heap_get();
    return large_alloc(size, MIN_ALIGN, 0, flags);
}

void *raw_alloc(size_t size, size_t align)
{
    if (align <= MIN_ALIGN) {
        if (size > init_large_from(size))
            return large_alloc_keeping(size, 0);
        return alloc_in_class(sizeclass_of(size), false);
    }
    if (size > PTRDIFF_MAX - align)
        return NULL;
    int cls = raw_aligned_class(size, align, init_large_from(size));
    return cls >= 0 ? alloc_in_class((unsigned)cls, true) : large_alloc(size, align, 0, 0);
}

void *raw_calloc(size_t size)
{
    /* A fresh large mapping is already zero; large_alloc clears a warm one. */
    if (size > init_large_from(size))
        return large_alloc_keeping(size, LARGE_ZERO);
    /* So is a block carved from memory nothing wrote (page.h). */
    page_zero_block = NULL;
    void *p = alloc_in_class(sizeclass_of(size), false);
    if (p && p != page_zero_block)
        os_zero(p, size);           /* a big one's written pages only (os.h) */
    return p;
}

/* These frees count on malloc's sweep tick too: a thread that frees a
 * peak and then allocates little never reached a sweep, and its empty
 * pages stayed resident (redis after FLUSHALL of 5 GB of 60 KB values:
 * every medium free comes here, and the full pages' first frees do). */
static ALWAYS_INLINE void free_tick(struct heap *h)
{
    if (unlikely(--h->tick < 0))
        heap_tick(h, NULL);
}

/* Out of line: the common free then makes no call that needs the heap
 * kept in a saved register (a push and a pop on every medium free). */
static NOINLINE void free_unfull(struct heap *h, struct page *pg)
{
    heap_page_unfull(h, pg);
    free_tick(h);
}

/* A report from the owner's free lanes, reached by a jump: a call of the
 * noreturn diag_fail kept a frame, so every medium free realigned the
 * stack on entry and again on return (noipa: inferred noreturn, this
 * would be called, not jumped to, again). */
static NOINLINE __attribute__((noipa)) void free_own_fail(const char *what, const void *p)
{
    diag_fail("free", what, p);
}

/* Whether b, a block start inside what pg carved, is one malloc never
 * handed out: one of the page's fresh run, which passes the shape check
 * (the run is carved), such as the pointer just past the last block
 * malloc returned. Pushed, it came out of malloc twice, once from the
 * list and once from the run. Those start at `fresh` or beyond
 * (segment.h). */
static ALWAYS_INLINE bool never_handed_out(const struct page *pg, const void *b)
{
    return (uint32_t)((uintptr_t)b & SEGMENT_MASK) >= pg->fresh;
}

/* free() of a block of the caller's own heap that the fast path refused
 * (a medium block, a full page, or the head of its free list), after
 * the block was checked (raw_free_own's descriptor check for a medium
 * block, else raw_checked_shape and never_handed_out). Inline: every medium
 * free comes here. */
static ALWAYS_INLINE void free_owned(struct page *pg, struct block *b)
{
    if (unlikely(b == pg->free)) {
        free_own_fail("double free", b);
        return;
    }
    /* Read first: a page that was not full may be gone after the push. */
    uint16_t flags = pg->flags;
    bool full = flags & PAGE_FULL;
    if (flags & PAGE_MEDIUM)
        page_medium_freed(pg, b);
    page_push_block(pg, b);
    struct heap *h = tls_heap;
    if (unlikely(full)) {
        free_unfull(h, pg);
        return;
    }
    free_tick(h);
}

/* A block of the caller's own heap checked against its page's shape (any
 * block: raw_free_own keeps a lane of its own for medium ones), then
 * freed. */
static ALWAYS_INLINE void free_owned_shaped(struct segment *s, void *p, const char *func)
{
    raw_checked_shape(s, p, func);
    struct page *pg = segment_page_of(s, p);
    if (unlikely(never_handed_out(pg, p))) {
        free_own_fail("invalid pointer (never handed out)", p);
        return;
    }
    free_owned(pg, p);
}

/* free_owned_shaped out of line: raw_free_own's case for any block but a
 * medium one (a block of a full small page, the head of a small page's
 * list: a double free, or something to report), apart so that its
 * registers do not weigh on the medium lane; and raw_free_heap_block's
 * rare one (the caller's own block), so that the common one (another
 * heap's) saves none. */
static NOINLINE void free_owned_at(struct segment *s, void *p, const char *func)
{
    free_owned_shaped(s, p, func);
}

/* raw_free_own's report on a medium block that failed its bound or is
 * not a block's start: which of the two, worked out here, off the
 * common path. */
static NOINLINE void medium_free_fail(const struct page *pg, const void *p)
{
    uint32_t in_seg = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
    uint32_t off = in_seg - medium_area_start_at(in_seg);
    uint32_t bs = sizeclass_block_size[pg->cls];
    bool carved = off < (uint32_t)pg->reserved * bs && off % bs == 0;
    free_own_fail(carved ? "invalid pointer (never handed out)"
                         : "invalid pointer (not the start of a block)", p);
}

void raw_free_own(void *p)
{
    struct segment *s = segment_of(p);
    /* A medium block: its page is the one its 1 MiB slice names, whose
     * blocks start at the slice's start (MEDIUM_HEADER into slice 0), and
     * the owner's own descriptor holds the class and the carved count. So
     * the shape check reads the line the push writes anyway, not the
     * segment header's page size and the shape's line (a 50,000 B pair:
     * 123 instructions -> 105). The kind comes first, from the header line
     * the general check reads anyway: in a small segment that descriptor
     * is another line, which a full small page's first free would have
     * pulled in for nothing. PAGE_MEDIUM is set only while the page is in
     * use (a released page is zeroed): anything else takes free_owned_at,
     * which reports what is wrong. Finding the page and its start from
     * the slice costs 8 instructions that pages of a whole segment did
     * not (a 50,000 B pair 96 -> 104, the loop included). */
    if (likely(s->kind == SEG_MEDIUM)) {
        uint32_t in_seg = (uint32_t)((uintptr_t)p & SEGMENT_MASK);
        /* &s->pages[in_seg >> MEDIUM_PAGE_SHIFT] (a descriptor is 64
         * bytes), spelled so that the compiler forms the pointer once: it
         * made both the pointer and a base for the fields' offsets, 4
         * instructions more a free. */
        struct page *pg = (struct page *)((char *)s->pages +
                                          ((in_seg >> (MEDIUM_PAGE_SHIFT - 6)) &
                                           ((MEDIUM_PAGES_PER_SEGMENT - 1) << 6)));
        if (likely(pg->flags & PAGE_MEDIUM)) {
            uint32_t start = medium_area_start_at(in_seg);
            uint32_t off = in_seg - start;
            /* One bound for three cases: a pointer into the header wraps off
             * around to at least 4 GiB - 64 KiB; a block of the fresh run and
             * anything past what is carved start at `fresh` or beyond, which
             * is at least the area's start (segment.h). It stood for a bound
             * on the carved count and never_handed_out's test of the run, 6
             * instructions more a medium pair. (raw_checked_shape testing the
             * same way, through one shared helper, cost every foreign free 2
             * more instructions.) */
            unsigned cls = pg->cls;
            uint32_t i = sizeclass_div(off, cls);
            if (unlikely(off >= pg->fresh - start || i * sizeclass_block_size[cls] != off)) {
                medium_free_fail(pg, p);
                return;
            }
            free_owned(pg, p);
            return;
        }
    }
    free_owned_at(s, p, "free");
}

void raw_free_other(void *p, uint16_t tag, const char *func)
{
    remote_free(tag, p, raw_checked_shape(segment_of(p), p, func));
}

/* raw_free() for a pointer whose segmap_tag_checked() names a heap
 * (1..MAX_HEAPS). */
static void raw_free_heap_block(void *p, uint16_t tag, const char *func)
{
    if (likely(tag != tls_tag)) {
        raw_free_other(p, tag, func);
        return;
    }
    free_owned_at(segment_of(p), p, func);
}

static uint16_t checked_tag(const void *p, const char *func)
{
    uint16_t tag = segmap_tag_checked(p);
    if (tag == TAG_NONE)
        diag_fail(func, "invalid pointer (not allocated by tally, or already freed)", p);
    return tag;
}

/* raw_free, or raw_free_plain when not `debug_too`. */
static ALWAYS_INLINE bool free_checked(void *p, const char *func, bool debug_too)
{
    uint16_t tag = checked_tag(p, func);
    if (tag >= TAG_LARGE_TAIL)
        return large_free(p, func, debug_too ? 0 : LARGE_DEBUG);
    if (!debug_too && tag == __atomic_load_n(&heap_debug_tag, __ATOMIC_RELAXED))
        return false;
    raw_free_heap_block(p, tag, func);
    return true;
}

void raw_free(void *p, const char *func)
{
    free_checked(p, func, true);
}

bool raw_free_plain(void *p, const char *func)
{
    return free_checked(p, func, false);
}

size_t raw_usable_size(void *p, const char *func)
{
    uint16_t tag = checked_tag(p, func);
    if (tag >= TAG_LARGE_TAIL)
        return large_usable_size(p, func);
    return raw_usable_own(p, func);
}

size_t raw_usable_own(void *p, const char *func)
{
    return raw_checked_shape(segment_of(p), p, func)->block_size;
}

void *raw_alloc_grown(size_t size, size_t usable)
{
    /* A small size is never a large block (the threshold is SMALL_MAX at
     * least, init.h), and is no growth of one of RAW_GROWN_LARGE: no call
     * to ask the span gates (a realloc among small sizes spent 20 of its
     * 270 instructions there). */
    if (size <= usable || size <= SMALL_MAX)
        return NULL;
    if (size > init_large_from(size) || (usable >= RAW_GROWN_LARGE && size <= init_mmap_threshold()))
        return large_alloc(size, MIN_ALIGN, 0, LARGE_GROWN);
    return NULL;
}

static void *realloc_move(void *p, size_t old_usable, size_t size, const char *func)
{
    void *q = raw_alloc_grown(size, old_usable);
    if (!q)
        q = raw_alloc(size, MIN_ALIGN);
    if (!q)
        return NULL;
    memcpy(q, p, old_usable < size ? old_usable : size);
    raw_free(p, func);
    return q;
}

/* A shrink never fails (glibc's never does, and code counts on it): when
 * no smaller block can be had, a large block shrinks where it is and any
 * other stays as it is. */
void *raw_realloc(void *p, size_t size, const char *func)
{
    size_t usable = raw_usable_size(p, func);
    if (segmap_tag(p) >= TAG_LARGE_TAIL) {
        /* One that grows stays a mapping, below the threshold too (a
         * block raw_alloc_grown gave one, or one mapped while the
         * threshold was lower): mremap moves no bytes. */
        if (size > init_large_from(size) || size > usable)
            return large_realloc(p, size);
        void *q = realloc_move(p, usable, size, func);
        return q ? q : large_realloc(p, size);
    }
    if (raw_realloc_stays(usable, size))
        return p;
    void *q = realloc_move(p, usable, size, func);
    return q || size > usable ? q : p;
}

/* ---- debug blocks ---------------------------------------------------- */

COLD_TEXT void *raw_alloc_debug(size_t size, size_t align, size_t front)
{
    if (align < MIN_ALIGN)
        align = MIN_ALIGN;
    front = align_up(front, align);
    if (size > PTRDIFF_MAX - front - align)
        return NULL;
    int cls = raw_aligned_class(front + size, align, init_mmap_threshold());
    if (cls < 0)
        return large_alloc(size, align, front, LARGE_DEBUG);
    uint8_t *b = heap_alloc_shared(SHARED_DEBUG, (unsigned)cls, true);
    return b ? b + front : NULL;
}

COLD_TEXT void *raw_debug_block_of(const void *p)
{
    if (segmap_tag_checked(p) != __atomic_load_n(&heap_debug_tag, __ATOMIC_RELAXED))
        return NULL;
    const struct page_shape *sh = segment_shape_of(segment_of(p), p);
    if (!sh->in_use || (uintptr_t)p < (uintptr_t)sh->start)
        return NULL;
    uintptr_t off = (uintptr_t)p - (uintptr_t)sh->start;
    if (off >= (uintptr_t)__atomic_load_n(&sh->reserved, __ATOMIC_RELAXED) * sh->block_size)
        return NULL;
    return sh->start + (size_t)sizeclass_div((uint32_t)off, sh->cls) * sh->block_size;
}

bool raw_is_debug(const void *p)
{
    uint16_t tag = segmap_tag_checked(p);      /* TAG_NONE: raw_free reports it */
    if (tag >= TAG_LARGE_TAIL)
        return large_flags(p) & LARGE_DEBUG;
    return tag == __atomic_load_n(&heap_debug_tag, __ATOMIC_RELAXED);
}

COLD_TEXT void raw_free_debug(void *p)
{
    if (segmap_tag_checked(p) >= TAG_LARGE_TAIL) {
        large_free(p, "free", 0);
        return;
    }
    void *b = raw_debug_block_of(p);
    if (!b)
        diag_fail("free", "invalid pointer (not a debug block)", p);
    raw_free(b, "free");
}
