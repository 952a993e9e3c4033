/*
 * segment.h - segments, pages, and the segmap that maps an address to its
 * owner without touching the memory.
 *
 * Invariants:
 *   - A segment is SEGMENT_SIZE bytes at a SEGMENT_SIZE-aligned address; its
 *     header (struct segment) sits at the start, followed by the page area.
 *   - Small segments have PAGES_PER_SEGMENT pages of PAGE_SIZE; page 0 loses
 *     its first SMALL_HEADER bytes to the header. Medium segments have
 *     MEDIUM_PAGES_PER_SEGMENT pages of MEDIUM_PAGE_SIZE; page 0's area
 *     starts at MEDIUM_HEADER.
 *   - segmap[addr >> SEGMENT_SHIFT] holds the owner heap's tag for as long
 *     as the segment is mapped and owned; it is cleared before unmapping.
 *   - Page descriptors are only written by the owning heap's thread.
 */
#ifndef TALLY_SEGMENT_H
#define TALLY_SEGMENT_H

#include "internal.h"

#define SEGMAP_BITS   (47 - SEGMENT_SHIFT)
#define SEGMAP_MASK   (((uintptr_t)1 << SEGMAP_BITS) - 1)
#define SMALL_HEADER  (8 * 1024)
#define MEDIUM_HEADER (64 * 1024)
#define TAG_LARGE_TAIL 0xFFFD  /* 2nd.. 4 MiB region of a large block */

enum segment_kind { SEG_SMALL = 1, SEG_MEDIUM = 2 };

/* page->flags: free()'s fast path pushes a block only onto a page whose
 * flags are exactly PAGE_OPEN, which page_init sets on small pages. A
 * descriptor nobody opened is zero: an unassigned page, and slices 4..63
 * of a medium segment (its descriptors are pages[0..3]), whose zero-filled
 * descriptors need no write, and so no page fault, when the segment is
 * mapped. The 64 KiB slices 0..3 of a medium segment land on its four
 * pages' own descriptors: PAGE_MEDIUM keeps those from the fast path
 * too, so every medium free is checked: the owner's against the page's
 * descriptor (raw_free_own), any other thread's against its shape. */
#define PAGE_OPEN     0x1
#define PAGE_FULL     0x2   /* out of its class's queue until a block comes back */
#define PAGE_MEDIUM   0x4
/* Medium pages only (small pages keep exactly PAGE_OPEN): the fresh run
 * lies where nothing was written since the area was mapped or purged, so
 * its blocks are zero (page.c, page_extend; calloc skips clearing them). */
#define PAGE_ZERO_RUN 0x8
/* On its heap's retired list (heap.c): what tells a retired page from an
 * empty one still in its class's queue when a segment changes kind. A
 * retired page holds no block: only a bad free meets the bit, which sends
 * it off free's fast path to the owner's checks (raw.c). */
#define PAGE_RETIRED  0x10

/* A free block's first word links it to the next free block, XOR-ed with a
 * per-process secret: a linear overflow from the block before it, or a
 * use-after-free write, cannot plant a chosen pointer for malloc to return
 * (it would need the secret). It costs one XOR on each fast path. */
struct block { uintptr_t link; };

extern HIDDEN uintptr_t block_secret;

static inline struct block *block_next(const struct block *b)
{
    return (struct block *)(b->link ^ block_secret);
}

static inline void block_set_next(struct block *b, const struct block *next)
{
    b->link = (uintptr_t)next ^ block_secret;
}

/* A page's descriptor: what its owner reads and writes as it allocates
 * and frees. Where the page lies and how it is cut up is its shape (below,
 * page_start and page_block_size); `cls` and `reserved` are in both, the
 * owner's copies on the line it works on, the shape's for other threads. */
struct page {
    _Alignas(64) struct block *free;    /* fast-path free list; a line each */
    uint32_t used;             /* blocks handed out and not yet freed */
    uint16_t flags;
    uint8_t  cls;
    union {
        uint8_t sparse_seen;   /* small: the last sweep found it sparse (heap.c) */
        uint8_t carved_seen;   /* medium: `reserved`'s low byte at the sweep's
                                  last look (heap.c) */
    };
    uint16_t capacity;         /* blocks that fit in the page */
    uint16_t reserved;         /* blocks carved from the area so far */
    uint16_t index;            /* position in the segment */
    uint16_t held;             /* small pages: OS pages purged while the page
                                  lives; their (free) blocks are off the list */
    uint32_t touched;          /* bytes from the area's start carved since it
                                  was last purged, by this class or earlier ones */
    /* The fresh run (page.c): never-used blocks carved but not threaded,
     * handed out one after the other from `fresh` (a byte offset from the
     * segment) while it is below `fresh_end`, `fresh_size` apart. With no
     * run open both are the end of what is carved (the area's start on a
     * new page), so a carved block was handed out, now or before, exactly
     * when it starts below `fresh`: the owner's frees check that with one
     * compare (raw.c). */
    uint32_t fresh;
    struct page *next, *prev;  /* class queue or retired list */
    union {
        uint64_t retired_at;   /* retired: ms when it joined the list */
        struct {
            uint32_t swept_used;   /* in a queue: `used` at the last partial
                                      purge, UINT32_MAX once it hands out or
                                      (medium) takes back a block after it
                                      (heap.c); a kept list: `used` at the
                                      last sweep */
            uint32_t looked_at;    /* medium, in a queue: the clock's ms (low
                                      32 bits) when the sweep last marked or
                                      purged its free blocks */
        };
    };
    uint32_t fresh_end, fresh_size;
};

_Static_assert(sizeof(struct page) == 64, "one descriptor per cache line");

/* A page's layout, the one place it is kept: where the blocks start and
 * how big they are, and whether the page is assigned to a class. Other
 * threads check a freed block against it (raw.c); it sits apart from the
 * descriptors because the owner writes its descriptor's line on every
 * malloc and free, and a check that read that line would pull it back and
 * forth between the cores. A shape changes only when the page is set up,
 * carves and is released. */
struct page_shape {
    uint8_t *start;            /* first block */
    uint32_t block_size;
    uint16_t reserved;         /* written with an atomic store */
    uint8_t cls;
    uint8_t in_use;            /* assigned to a class (else free in segment) */
};

struct heap;

struct segment {
    struct heap *heap;
    uint32_t kind;
    uint32_t page_shift;       /* PAGE_SHIFT or MEDIUM_PAGE_SHIFT */
    uint16_t pages_in_use;
    uint16_t pages_retired;    /* of those, empty and kept on the heap's
                                  retired lists (heap.c) */
    uint16_t page_count;
    uint16_t guarded;          /* last OS page is PROT_NONE (secure mode) */
    uint64_t free_pages;       /* bitmap of pages not assigned to a class */
    struct segment *next, *prev;            /* the heap's segments */
    struct segment *all_next, *all_prev;    /* every live segment (stats) */
    /* Shapes first: the fields, the shapes and the first 47 descriptors
     * share the header's first OS page, so a medium segment (four pages) or
     * a small one using fewer pages faults in one header page, not two. */
    struct page_shape shapes[PAGES_PER_SEGMENT];
    struct page pages[PAGES_PER_SEGMENT];
};

_Static_assert(sizeof(struct segment) <= SMALL_HEADER, "segment header too big");
_Static_assert(PAGES_PER_SEGMENT == 64, "free_pages bitmap is one word");

/* The map is a mapping made first thing at start-up (segmap_init), not
 * 64 MiB of .bss: with it libtally.so's file mapping spanned 67 MB, which
 * the kernel puts on a 2 MiB boundary, and ld.so put libc right below it,
 * so every run pulled in the same 64 KiB windows of libc's text: here 236
 * pages against 196-226 (mean 206) with glibc's malloc alone. Until the
 * map exists `segmap` points to one zero entry and `segmap_mask` is 0, so
 * every pointer reads TAG_NONE (a free(NULL) in a constructor that runs
 * before tally's: the slow path returns; any other pointer is reported). */
extern HIDDEN uint16_t *segmap;
extern HIDDEN uintptr_t segmap_mask;

static inline uint16_t segmap_tag(const void *p)
{
    /* The mask: a plain read, so the compiler folds it into the AND (an
     * atomic load is an instruction of its own; so was a fence to keep
     * the map's load after it). A thread that frees a block of tally's
     * got it after start-up finished, and sees the map and the mask; a
     * NULL's index is 0 under either mask. Only a wild pointer freed
     * while another thread starts tally up could pair the new mask with
     * the old map. The TSan run suppresses this read by the global's
     * name. The entry: relaxed, the same plain load, and no data race
     * when a range is unmapped and remapped by another thread. */
    uintptr_t mask = segmap_mask;
    const uint16_t *map = __atomic_load_n(&segmap, __ATOMIC_RELAXED);
    return __atomic_load_n(&map[((uintptr_t)p >> SEGMENT_SHIFT) & mask], __ATOMIC_RELAXED);
}

/* segmap_tag for every path but free()'s fast one: TAG_NONE for an
 * address at or above 2^47. tally maps nothing there, and the mask above
 * would alias such a garbage pointer (tagged, or in the kernel half) onto
 * a live segment's entry: the shape check then read a header at a
 * non-canonical address and died of SIGSEGV instead of reporting. The
 * fast path keeps the bare lookup (docs/design.md, "Bad input"). */
static inline uint16_t segmap_tag_checked(const void *p)
{
    return (uintptr_t)p >> (SEGMAP_BITS + SEGMENT_SHIFT) ? TAG_NONE : segmap_tag(p);
}

static inline struct segment *segment_of(const void *p)
{
    return (struct segment *)((uintptr_t)p & ~SEGMENT_MASK);
}

static inline struct page *segment_page_of(struct segment *s, const void *p)
{
    return &s->pages[((uintptr_t)p & SEGMENT_MASK) >> s->page_shift];
}

/* The fast path's lookup: one descriptor per 64 KiB slice, no load of the
 * segment's page size. In a medium segment this lands on a descriptor
 * nobody opened, which sends free() to the slow path and segment_page_of(). */
static inline struct page *segment_slice_of(struct segment *s, const void *p)
{
    return &s->pages[((uintptr_t)p >> PAGE_SHIFT) & (PAGES_PER_SEGMENT - 1)];
}

static inline struct page_shape *page_shape_of(struct page *pg)
{
    return &segment_of(pg)->shapes[pg->index];
}

/* Only for pages inside a segment (not page_empty or a kept list). */
static inline uint8_t *page_start(struct page *pg) { return page_shape_of(pg)->start; }
static inline uint32_t page_block_size(struct page *pg) { return page_shape_of(pg)->block_size; }

/* The shape of p's page, found from the address alone (no descriptor read). */
static inline struct page_shape *segment_shape_of(struct segment *s, const void *p)
{
    return &s->shapes[((uintptr_t)p & SEGMENT_MASK) >> s->page_shift];
}

/* Where the area of the medium page holding offset `off` of its segment
 * starts: the page's boundary, or MEDIUM_HEADER in page 0. raw_free_own
 * computes it on every medium free, from the block's offset (3
 * instructions fewer than from the page's index). */
static inline uint32_t medium_area_start_at(uint32_t off)
{
    uint32_t start = off & (uint32_t)(SEGMENT_MASK & ~(MEDIUM_PAGE_SIZE - 1));
    return start ? start : MEDIUM_HEADER;
}

/* Where page i's area starts, from its segment's start: after the header
 * in page 0, on the page's boundary in the others. */
static inline size_t segment_area_start(enum segment_kind kind, unsigned i)
{
    if (kind == SEG_MEDIUM)
        return medium_area_start_at((uint32_t)i << MEDIUM_PAGE_SHIFT);
    return i == 0 ? SMALL_HEADER : (size_t)i << PAGE_SHIFT;
}

/* From the area's start to the page's end, less a guard page. */
static inline size_t page_area_size(const struct segment *s, const struct page *pg)
{
    size_t guard = s->guarded && pg->index == s->page_count - 1u ? OS_PAGE : 0;
    size_t end = (size_t)(pg->index + 1u) << s->page_shift;
    return end - segment_area_start((enum segment_kind)s->kind, pg->index) - guard;
}

HIDDEN void segment_init_secret(void);
/* Maps the segment map; before any segment or large block exists. */
HIDDEN void segmap_init(void);
HIDDEN struct segment *segment_alloc(struct heap *h, uint16_t tag, enum segment_kind kind);
/* Sets s, whose pages are all released, up as a segment of `kind` where
 * it lies, keeping its owner, tag and list links; its memory stays as it
 * is (the caller notes what was written in the new pages' `touched`). */
HIDDEN void segment_rekind(struct segment *s, enum segment_kind kind);
HIDDEN void segment_free(struct segment *s);
HIDDEN struct page *segment_take_page(struct segment *s);
/* Page i of s, which is free. */
HIDDEN struct page *segment_take_page_at(struct segment *s, unsigned i);
HIDDEN void segment_release_page(struct segment *s, struct page *pg);
HIDDEN void segmap_set_range(const void *p, size_t size, uint16_t first, uint16_t rest);
HIDDEN void segment_cache_release(void);
/* A bare segment for span.c (span.h): a cached one or the reservation's
 * next, with no guard page; NULL when the OS refuses. *fresh: it reads as
 * zero (never used). Given back with every page purged but its first. */
HIDDEN void *segment_take_bare(bool *fresh);
HIDDEN void segment_give_bare(void *p);
HIDDEN void segment_lock_all(void);
HIDDEN void segment_unlock_all(void);
HIDDEN void segment_reset_locks(void);

/* Calls fn for every live segment while segments cannot be freed. */
HIDDEN void segment_foreach(void (*fn)(struct segment *, void *), void *arg);

#endif
