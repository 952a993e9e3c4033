/*
 * large.c - large blocks: runs of span segments up to SPAN_MAX, mmap-backed
 * blocks above it with their mremap-based realloc, and how a request is
 * served from the large cache (split, glued, grown into, or moved onto).
 */
#include "large.h"
#include "segment.h"
#include "os.h"
#include "diag.h"
#include "large_cache.h"
#include "large_maps.h"
#include "span.h"
#include "span_keep.h"
#include "init.h"

#include <string.h>

#include <stdatomic.h>

#define LARGE_MAGIC  0x7a11e7b10c4b16ULL
#define LARGE_OFFSET 128   /* the header, with its cuts, fits in front */

struct large_header {
    uint64_t magic;
    size_t map_size;      /* bytes mapped, header included */
    size_t offset;        /* block start - mapping start */
    size_t base_align;    /* alignment the mapping start must keep */
    size_t req;           /* the size last asked for (large_alloc, large_realloc) */
    uint32_t flags;
    struct large_maps maps;   /* the kernel mappings it spans (large_maps.h) */
};
_Static_assert(sizeof(struct large_header) <= LARGE_OFFSET, "large header too big");
/* A span block's header slot holds all but the cuts, which it has none of
 * (span.h): large.c never touches a span block's `maps`. */
_Static_assert(offsetof(struct large_header, maps) <= SPAN_HEADER, "span header slot too small");

/* Where h's block is `offset` bytes into: its mapping, which h starts, or
 * its span run, whose header h is kept out of band (span.h). */
static char *large_base(const struct large_header *h)
{
    return h->flags & LARGE_SPAN ? span_run_of(h) : (char *)h;
}

static _Atomic uint64_t live_count, live_bytes;
/* Of live_bytes, those of blocks on mappings of their own: the large
 * cache's peak rule counts these (span blocks have their own rule). */
static _Atomic uint64_t mapped_live;

/* Adds `bytes` (modular: a shrink subtracts) to the live bytes of h's kind. */
static void large_count_bytes(const struct large_header *h, uint64_t bytes)
{
    atomic_fetch_add_explicit(&live_bytes, bytes, memory_order_relaxed);
    if (!(h->flags & LARGE_SPAN))
        atomic_fetch_add_explicit(&mapped_live, bytes, memory_order_relaxed);
}

static void large_tag(struct large_header *h)
{
    segmap_set_range(h, h->map_size, TAG_LARGE, TAG_LARGE_TAIL);
}

static void large_untag(struct large_header *h)
{
    segmap_set_range(h, h->map_size, TAG_NONE, TAG_NONE);
}

/* Puts the pieces' pages (page tables, not bytes) side by side in one
 * mapping of `size` bytes; whatever they do not cover stays fresh. The
 * largest piece grows where it is when the address space after it is
 * free, and only the others move in after it; else every piece moves into
 * a fresh mapping. (Under shadow paging a moved page faults again on its
 * next touch, hidden from the guest; malloc-large moved 1.16 GiB of pages
 * a run with every piece moving, 0.62 this way: docs/benchmarks.md.) *m
 * gets the cuts between them. NULL, with every piece unmapped, when the
 * kernel says no. */
static struct large_header *large_glue(struct large_piece *pc, unsigned n, size_t size,
                                       struct large_maps *m)
{
    /* Largest first; the first of them that grows in place goes to the
     * front and stays where it is. */
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = i + 1; k < n; k++)
            if (pc[k].size > pc[i].size) {
                struct large_piece t = pc[i];
                pc[i] = pc[k];
                pc[k] = t;
            }
    unsigned moved = 0;     /* the pieces before it stay where they are */
    for (unsigned i = 0; i < n && !moved; i++)
        if (os_grow_in_place(pc[i].base, pc[i].size, size, large_maps_last(&pc[i].maps))) {
            struct large_piece t = pc[0];
            pc[0] = pc[i];
            pc[i] = t;
            moved = 1;
        }
    char *dst = moved ? pc[0].base : os_map_aligned(size, SEGMENT_SIZE);
    size_t off = moved ? pc[0].size : 0;
    *m = moved ? pc[0].maps : (struct large_maps){ 0 };
    for (unsigned i = moved; i < n; i++) {
        if (dst)
            os_move_into(pc[i].base, pc[i].size, dst + off, false);
        else
            os_unmap(pc[i].base, pc[i].size);
        large_maps_append(m, &pc[i].maps, off);
        off += pc[i].size;
    }
    /* The fresh part: a mapping of its own, unless it is the grown piece's
     * own last one with nothing moved in before it. */
    if (off < size && !(moved && n == 1))
        m->cut[m->n++] = (uint32_t)(off / OS_PAGE);
    return (struct large_header *)dst;
}

/* Cuts pc on the first segment boundary past `need` bytes; the tail stays
 * where it is, a mapping of its own, and goes back into the cache (no
 * system call, no fault). */
static void piece_trim(struct large_piece *pc, size_t need)
{
    size_t head = align_up(need, SEGMENT_SIZE);
    if (head < pc->size) {
        struct large_maps tail;
        large_maps_split(&pc->maps, head, &tail);
        large_cache_put(pc->base + head, pc->size - head, &tail, false);
        pc->size = head;
    }
}

/* A warm mapping of at least *map_size bytes from the cache, or NULL.
 * - the last mapping taken is split on the first segment boundary past
 *   what it must cover; the tail stays where it is, a mapping of its own,
 *   and goes back into the cache (no system call, no fault);
 * - when what was taken falls short (several mappings, or one too small),
 *   it is glued: the pages move into one fresh mapping, so a request
 *   bigger than any cached block still reuses their resident pages, and
 *   only the part none of them covers faults.
 * Splitting only up from 3x the request, and without gluing, a bigger
 * request faulted in what the cache could not give whole: malloc-large
 * took 130k faults and 0.25 s; glued and always split, 60k and 0.14 s
 * at a lower peak RSS (tcmalloc: 60k faults, 0.14 s, 14% more RSS).
 * *map_size is updated to the size of the mapping returned, *m to its cuts. */
static struct large_header *large_take_cached(size_t *map_size, struct large_maps *m)
{
    /* Free span units expire here too: a program past a phase of span
     * blocks may call malloc too rarely for a sweep (CPython serves its
     * small objects from pymalloc), and its freed runs stayed resident. */
    large_expire(false);
    size_t want = *map_size, before = 0;
    struct large_piece pc[LARGE_MAX_MAPS];
    unsigned n = large_cache_take(want, pc);
    if (!n)
        return NULL;
    for (unsigned i = 0; i + 1 < n; i++)
        before += pc[i].size;
    struct large_piece *last = &pc[n - 1];
    piece_trim(last, want - before);
    size_t got = before + last->size;
    if (n == 1 && got >= want) {
        *map_size = got;
        *m = last->maps;
        return (struct large_header *)last->base;
    }
    *map_size = got > want ? got : want;
    return large_glue(pc, n, *map_size, m);
}

static void large_count(const struct large_header *h)
{
    atomic_fetch_add_explicit(&live_count, 1, memory_order_relaxed);
    large_count_bytes(h, h->map_size);
    if (!(h->flags & LARGE_SPAN))
        large_cache_fit_live();   /* a fresh mapping, or a glued one's fresh part */
}

/* A block of `size` bytes at `offset` into a span run of run_size bytes
 * (span.h), aligned to `align`, or NULL when the OS refuses a segment. */
static void *large_span_alloc(size_t size, size_t offset, size_t run_size, size_t align,
                              unsigned flags)
{
    bool zero = flags & LARGE_ZERO;
    void *slot;
    char *run = span_keep_take(span_run_size(run_size));
    if (run) {
        slot = span_header_at(run);
        if (zero) {
            os_mark_defined(run + offset, size);
            memset(run + offset, 0, size);
        }
    } else {
        run = span_take(run_size, zero ? offset : 0, zero ? offset + size : 0, &slot);
        if (!run && large_expire(true))   /* both give way */
            run = span_take(run_size, zero ? offset : 0, zero ? offset + size : 0, &slot);
        if (!run)
            return NULL;
    }
    /* Field by field: the slot has no room for `maps`. base_align keeps
     * the block's alignment: a move to a mapping needs it. */
    struct large_header *h = slot;
    h->map_size = span_run_size(run_size);
    h->offset = offset;
    h->base_align = align;
    h->req = size;
    h->flags = (flags & ~LARGE_ZERO) | LARGE_SPAN;
    h->magic = LARGE_MAGIC;
    large_count(h);
    return run + offset;
}

/* Where large_place may put a block: a span run when new and its size's
 * gate wants it (under SPAN_NEW_MAX), a span block's growth (up to SPAN_MAX),
 * or a mapping whatever its size. */
enum large_where { PLACE_NEW, PLACE_SPAN_GROWTH, PLACE_MAPPING };

/* large_alloc once the block's place is known: `offset` bytes into a
 * mapping aligned to base_align, or span_off into a span run (where the
 * header is out of band: span.h) aligned to `align`. */
static void *large_place(size_t size, size_t offset, size_t span_off, size_t align,
                         size_t base_align, unsigned flags, enum large_where where)
{
    if (size > PTRDIFF_MAX - offset - OS_PAGE)
        return NULL;
    size_t guard = init_secure() ? OS_PAGE : 0;
    /* At least one byte: a zero-size block placed at offset = alignment
     * would otherwise start at the very end of its own mapping. */
    size_t map_size = align_up(offset + (size ? size : 1), OS_PAGE) + guard;
    bool warm = base_align == SEGMENT_SIZE && !guard;
    size_t run_size = align_up(span_off + (size ? size : 1), OS_PAGE);
    if (warm && span_off < SPAN_UNIT && align <= SPAN_UNIT &&
        (where == PLACE_SPAN_GROWTH ? run_size <= SPAN_MAX
         : where == PLACE_NEW && size < SPAN_NEW_MAX && run_size <= SPAN_NEW_MAX &&
               span_wanted(size)))
        return large_span_alloc(size, span_off, run_size, align, flags);
    /* Above a segment a block maps whole segments, as the cache's split
     * entries already are, when that adds at most a quarter (the most
     * jemalloc's size classes round up; 4 MiB and a page would otherwise
     * take 8): the kernel places a fresh mapping right below the last one,
     * so it starts aligned (one mmap, not an unaligned try and an over-map
     * trimmed on both sides), and blocks mapped one after another abut,
     * so once freed they join in the cache where they lie instead of
     * being glued by moving their pages. Under shadow paging a moved page
     * faults again on its next touch, hidden from the guest (5-6 us a page
     * on the Dec 4 guest; a fresh fault 11.5, a copy 0.3): malloc-large
     * took 1.30 s against 1.85 (9 alternating runs) at 3.7% more peak RSS.
     * Rounding every size took it to 1.13 s, at up to twice the commit
     * charge. The tail past the request is resident only once written. */
    size_t whole = align_up(map_size, SEGMENT_SIZE);
    if (warm && map_size > SEGMENT_SIZE && whole - map_size <= map_size / 4)
        map_size = whole;
    struct large_maps maps = { 0 };
    struct large_header *h = warm ? large_take_cached(&map_size, &maps) : NULL;
    if (!h) {
        warm = false;
        maps.n = 0;
        h = os_map_aligned(map_size, base_align);
        if (!h && large_cache_expire(true))   /* refused: the cache gives way */
            h = os_map_aligned(map_size, base_align);
    }
    if (!h)
        return NULL;
    os_mark_defined(h, offset);
    *h = (struct large_header){ LARGE_MAGIC, map_size, offset, base_align, size,
                                (flags & ~LARGE_ZERO) | (guard ? LARGE_GUARD : 0), maps };
    if (guard)
        os_protect((char *)h + map_size - OS_PAGE, OS_PAGE, true);
    /* A warm block is cleared by writing it, not by giving its pages back
     * (jemalloc zeroes a reused extent with MADV_DONTNEED): the pages the
     * last owner touched are resident, and writing them beats refaulting
     * them. 50 rounds of a 16 MiB malloc, free and calloc (medians of 3):
     * with all 16 MiB written each time tally took 0.12 s, glibc 0.12,
     * jemalloc 0.31. Only the pages someone wrote are written (os_zero):
     * clearing the rest faulted in pages nobody had touched, so a program
     * that callocs big tables and writes a little of each held every page
     * of them (2,000 callocs of 1-16 MiB, one page written in each: 1.32 s
     * and 236 MB of peak RSS; now 0.107 s and 3.5 MB, jemalloc 0.155 s and
     * 4.6 MB; docs/benchmarks.md). */
    if (warm && (flags & LARGE_ZERO))
        os_zero((char *)h + offset, size);
    large_tag(h);
    large_count(h);
    return (char *)h + offset;
}

void *large_alloc(size_t size, size_t align, size_t front, unsigned flags)
{
    if (align < MIN_ALIGN)
        align = MIN_ALIGN;
    if (front > PTRDIFF_MAX / 2)
        return NULL;
    size_t offset = align_up(LARGE_OFFSET + front, align);
    return large_place(size, offset, align_up(front, align), align,
                       align > SEGMENT_SIZE ? align : SEGMENT_SIZE, flags, PLACE_NEW);
}

/* The header of the live large block starting at p, or NULL. */
static struct large_header *large_header_of(const void *p)
{
    uintptr_t i = ((uintptr_t)p >> SEGMENT_SHIFT) & SEGMAP_MASK;
    while (__atomic_load_n(&segmap[i], __ATOMIC_RELAXED) == TAG_LARGE_TAIL && i > 0)
        i--;
    if (__atomic_load_n(&segmap[i], __ATOMIC_RELAXED) != TAG_LARGE)
        return NULL;
    struct large_header *h = (struct large_header *)(i << SEGMENT_SHIFT);
    if (span_is_segment(h))
        h = span_header_at(p);
    if (!h || h->magic != LARGE_MAGIC || large_base(h) + h->offset != p)
        return NULL;
    return h;
}

unsigned large_flags(const void *p)
{
    struct large_header *h = large_header_of(p);
    return h ? h->flags : 0;
}

static struct large_header *large_checked(const void *p, const char *func)
{
    struct large_header *h = large_header_of(p);
    if (!h)
        diag_fail(func,
                  "invalid pointer (not the start of a live large block: inside one, or already freed)",
                  p);
    return h;
}

HOT_TEXT bool large_expire(bool all)
{
    return large_cache_expire(all) | span_expire(all);
}

static void large_release(struct large_header *h)
{
    size_t map_size = h->map_size;
    h->magic = 0;
    atomic_fetch_sub_explicit(&live_count, 1, memory_order_relaxed);
    large_count_bytes(h, -(uint64_t)map_size);
    if (h->flags & LARGE_SPAN) {
        if (!span_keep_put(large_base(h), map_size))
            span_give(large_base(h), map_size);
        return;
    }
    large_untag(h);
    if (h->base_align != SEGMENT_SIZE || (h->flags & LARGE_GUARD))
        os_unmap(h, map_size);
    else
        large_cache_put(h, map_size, &h->maps, true);
}

bool large_free(void *p, const char *func, unsigned refuse)
{
    struct large_header *h = large_checked(p, func);
    if (h->flags & refuse)
        return false;
    large_release(h);
    return true;
}

/* Grows h, whose mapping ends at old_map and has room for cuts `maps`,
 * into the cached mapping that starts right there when that one covers
 * new_map: the pages are already in place, and those its last owner
 * touched are resident (a buffer grown by doubling took the cached tail
 * of its own last round's block, which sat in the way of growing in
 * place, and faulted in fresh pages past it instead). What lies past
 * the segment boundary beyond new_map, or beyond twice old_map when that
 * is more, stays cached (piece_trim). True when it did; the caller
 * untagged h. */
static bool large_grow_into_cached(struct large_header *h, size_t old_map, size_t new_map,
                                   struct large_maps *maps)
{
    struct large_piece pc;
    if (h->flags & LARGE_GUARD || !large_cache_take_at((char *)h + old_map, &pc))
        return false;
    if (old_map + pc.size < new_map || maps->n + 1 + pc.maps.n > LARGE_MAX_MAPS - 1 ||
        (old_map + pc.size) / OS_PAGE > UINT32_MAX) {
        large_cache_put(pc.base, pc.size, &pc.maps, false);
        return false;
    }
    /* At least double: each split is a cut, and a block growing 1 MiB a
     * step into a cached 64 MiB neighbour ran out of them at the 16th
     * step and moved into fresh pages while the rest of the neighbour sat
     * cached (realloc-M's 64 MiB of faults a round); doubling splits it
     * a handful of times. */
    size_t take = new_map > 2 * old_map ? new_map : 2 * old_map;
    piece_trim(&pc, take - old_map);
    large_maps_append(maps, &pc.maps, old_map);
    h->maps = *maps;
    h->map_size = old_map + pc.size;
    return true;
}

/* Moves h, a block that must leave its mapping to grow to new_map, onto
 * the front of the cached mapping that covers new_map, whose resident
 * pages past the block's are the new part. Growing in place instead
 * faulted in every page of the new part while the entry sat idle
 * (bufcycle's large buffers, each grown to twice its size once).
 * - Below a segment the block is copied onto the entry's front, and its
 *   own mapping, resident, goes into the cache: moving its pages there
 *   (page tables, not bytes) would unmap the entry's front pages, and a
 *   block that small sits alone in its segment-aligned range, so nothing
 *   else gives the cache a block of its size back. bufcycle's batches
 *   then took more blocks than the last one freed and mapped the rest
 *   afresh (0.73 -> 0.61 s, 9,191 -> 7,821 faults a round; a copy costs
 *   0.3 us a page, a fault 11.5 us on the Dec 4 guest).
 * - From a segment up the pages still move: copying them too measured
 *   no different on the suite (bufgrow, realloc-M), and such a block
 *   joins or glues with its neighbours in the cache anyway.
 * The new header, or NULL when no entry covers new_map within the cut
 * bound; the caller untagged h. */
static struct large_header *large_move_onto_cached(struct large_header *h, size_t old_map,
                                                   size_t new_map, const struct large_maps *maps)
{
    struct large_piece pc;
    /* The result has the block's cuts, one where it ends, and the entry's
     * cuts past that. */
    if (h->flags & LARGE_GUARD || h->base_align != SEGMENT_SIZE || maps->n + 2 > LARGE_MAX_MAPS ||
        !large_cache_take_covering(new_map, LARGE_MAX_MAPS - 2 - maps->n, &pc))
        return NULL;
    piece_trim(&pc, new_map);
    if (old_map < SEGMENT_SIZE) {
        struct large_header *n = (struct large_header *)pc.base;
        os_mark_defined(n, old_map);    /* memcheck: a freed block's pages */
        memcpy(n, h, old_map);
        n->maps = pc.maps;
        n->map_size = pc.size;
        large_cache_put(h, old_map, maps, false);
        return n;
    }
    struct large_maps rest;
    large_maps_split(&pc.maps, old_map, &rest);
    os_move_into(h, old_map, pc.base, true);
    struct large_header *n = (struct large_header *)pc.base;
    n->maps = *maps;
    large_maps_append(&n->maps, &rest, old_map);
    n->map_size = pc.size;
    return n;
}

/* The end of every large_realloc that resized: n, whose mapping (or span
 * run) was old_map bytes and is n->map_size now, holds `size` bytes
 * asked; a mapping is tagged again (a span's segment stays tagged), it is
 * counted, and when a mapping grew the cache keeps the peak rule
 * (large_cache_fit_live). */
static void *large_resized(struct large_header *n, size_t old_map, size_t size)
{
    n->req = size;
    if (!(n->flags & LARGE_SPAN))
        large_tag(n);
    /* Modular: a shrink subtracts. */
    large_count_bytes(n, n->map_size - old_map);
    if (n->map_size > old_map && !(n->flags & LARGE_SPAN))
        large_cache_fit_live();
    return large_base(n) + n->offset;
}

/* large_realloc for a span block: resized where it lies when span_resize
 * says so, else moved (copied) to a new block with its offset, whatever
 * lies in front of it (a debug header) included: a span run or, past
 * SPAN_MAX, a mapping. */
static void *large_span_realloc(struct large_header *h, size_t size)
{
    char *run = large_base(h), *p = run + h->offset;
    size_t old_run = h->map_size;
    size_t new_run = span_run_size(align_up(h->offset + size, OS_PAGE));
    if (new_run == old_run || (new_run < old_run && size >= h->req)) {
        h->req = size;      /* as a mapping keeps a growing request where it fits */
        return p;
    }
    /* A block that grew before is a growing buffer: its next growth to
     * SPAN_REGROW_MAX or more goes to a mapping, which grows with mremap
     * from there on, instead of being copied again at each step and at
     * SPAN_MAX (bufgrow, doubling to 8 MiB: 0.126 s against 0.092 before
     * spans). Grown once, as a server's request buffer that outgrew its
     * guess, it stays a span block, and so does any later growth below
     * that size (span.h says why). */
    bool again = new_run > old_run && (h->flags & LARGE_GROWN) && new_run >= SPAN_REGROW_MAX;
    if (!again && new_run <= SPAN_MAX && span_resize(run, old_run, new_run)) {
        h->map_size = new_run;
        if (new_run > old_run)
            h->flags |= LARGE_GROWN;
        return large_resized(h, old_run, size);
    }
    /* The block's offset in its run is what lies in front of it (a debug
     * header); base_align its alignment. */
    size_t front = h->offset, align = h->base_align;
    char *q = large_place(size, align_up(LARGE_OFFSET + front, align), front, align,
                          SEGMENT_SIZE, (h->flags & LARGE_DEBUG) | LARGE_GROWN,
                          again ? PLACE_MAPPING : PLACE_SPAN_GROWTH);
    if (!q)
        return NULL;
    size_t old_usable = old_run - front;
    size_t n = front + (old_usable < size ? old_usable : size);
    os_mark_defined(q - front, n);
    memcpy(q - front, (char *)p - front, n);
    large_release(h);
    return q;
}

void *large_realloc(void *p, size_t size)
{
    struct large_header *h = large_checked(p, "realloc");
    if (size > PTRDIFF_MAX - h->offset - OS_PAGE)
        return NULL;
    if (h->flags & LARGE_SPAN)
        return large_span_realloc(h, size);
    size_t guard = h->flags & LARGE_GUARD ? OS_PAGE : 0;
    size_t old_map = h->map_size;
    /* Page-rounded, not whole segments as large_alloc's: a step rounded
     * up to the next segment asks for more free address space behind the
     * block, and a glued block growing 1 MiB a step then moved its pieces
     * instead of growing its last mapping in place. */
    size_t new_map = align_up(h->offset + size, OS_PAGE) + guard;
    /* A request that grows stays where it fits: the mapping can be bigger
     * than the last one asked (the cache hands out whole segments), and
     * shrinking it there gave back the pages the growth was about to
     * write (the same doubling buffer's 1 MiB block in a cached 4 MiB
     * mapping shrank to 2 MiB, then grew again past it). A shrink gives
     * back what it can. */
    if (new_map == old_map || (new_map < old_map && size >= h->req)) {
        h->req = size;
        return p;
    }
    /* Untag first: once mremap moves the pages, another thread may map the
     * old range and tag it. The guard page moves to the new end. */
    large_untag(h);
    if (guard)
        os_protect((char *)h + old_map - guard, guard, false);
    /* A glued block spans one kernel mapping per piece: its last one may
     * grow in place; else os_remap_aligned moves the pieces, and the new
     * part is one more mapping, or, when that would pass LARGE_MAX_MAPS,
     * copies the block into a single one. */
    struct large_maps maps = h->maps;
    if (new_map > old_map) {
        /* Cached pages first: the mapping right behind the block, else
         * one that covers the new size. */
        struct large_header *c = large_grow_into_cached(h, old_map, new_map, &maps)
                                     ? h
                                     : large_move_onto_cached(h, old_map, new_map, &maps);
        if (c)
            return large_resized(c, old_map, size);
    }
    size_t last = large_maps_last(&maps);
    bool split = maps.n + 1 < LARGE_MAX_MAPS && old_map / OS_PAGE <= UINT32_MAX;
    enum os_remap_how how;
    struct large_header *n = os_remap_aligned(h, old_map, new_map, h->base_align, last,
                                              split, &how);
    if (!n && large_cache_expire(true))   /* refused: the cache gives way */
        n = os_remap_aligned(h, old_map, new_map, h->base_align, last, split, &how);
    if (!n) {
        if (guard)
            os_protect((char *)h + old_map - guard, guard, true);
        large_tag(h);
        return NULL;
    }
    if (guard)
        os_protect((char *)n + new_map - guard, guard, true);
    if (how == OS_REMAP_IN_PLACE) {
        struct large_maps gone;
        large_maps_split(&maps, new_map, &gone);   /* shrunk: cuts past the end go */
    } else if (how == OS_REMAP_PIECES) {
        maps.cut[maps.n++] = (uint32_t)(old_map / OS_PAGE);
    } else {
        maps.n = 0;
    }
    n->maps = maps;
    n->map_size = new_map;
    return large_resized(n, old_map, size);
}

size_t large_usable_size(const void *p, const char *func)
{
    struct large_header *h = large_checked(p, func);
    return h->map_size - h->offset - (h->flags & LARGE_GUARD ? OS_PAGE : 0);
}

size_t large_mapped_live(void)
{
    return (size_t)atomic_load_explicit(&mapped_live, memory_order_relaxed);
}

void large_counters(uint64_t *count, uint64_t *bytes)
{
    *count = atomic_load_explicit(&live_count, memory_order_relaxed);
    *bytes = atomic_load_explicit(&live_bytes, memory_order_relaxed);
}
