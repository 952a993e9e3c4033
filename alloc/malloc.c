/*
 * malloc.c - the exported malloc family: fast paths and their _slow twins.
 *
 * Call tree:
 *   malloc ──fast──> tls heap -> direct[(n+15)/16] page -> pop
 *          └─slow──> hooks_alloc (a mode is on) | raw_alloc -> heap slow path
 *   free   ──fast──> segmap tag | hooks bit == my heap's tag -> page -> push
 *          └─slow──> hooks_free (a mode is on) | raw_free_plain, else
 *                    hooks_free (a debug block)
 *   calloc ──fast──> malloc's small lane, then memset
 *          └─slow──> hooks_alloc | raw_calloc
 *   realloc ─own───> my heap's tag: checked in place, or malloc+copy+free
 *          └─slow──> hooks_realloc | raw_realloc
 * Instrumentation rides the tests the fast paths make anyway: while a mode
 * is on, malloc_fast_limit is 0 and the hooks bit is OR-ed into the tag, so
 * both fast paths miss and the slow paths dispatch. This is the only file
 * that sets errno.
 */
#define _GNU_SOURCE
#include "heap.h"
#include "remote.h"
#include "raw.h"
#include "init.h"
#include "usage.h"
#include "background.h"
#include "../instrument/hooks.h"
#include "../instrument/options.h"

#include <errno.h>
#include <malloc.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))
#define CALLER __builtin_return_address(0)
/* The two fast paths start on a cache line: where the linker happened to
 * put them moved the asterisk loop by 13% at the same instruction count
 * (malloc at 48 bytes into a line: 0.115 s; on a line: 0.101 s; medians
 * of 15 alternating runs). */
#define FAST_ENTRY __attribute__((aligned(64)))

static NOINLINE void *malloc_fail(void)
{
    errno = ENOMEM;
    return NULL;
}

/* Every allocating entry point ends here off its fast path. Inlined so
 * that malloc_slow stays one call deep whatever it grows. */
static ALWAYS_INLINE void *alloc_entry(size_t size, size_t align, enum hook_op op,
                                       const void *site)
{
    /* An alignment of 2^62 or more can never be met, and past it the
     * layers' `PTRDIFF_MAX - align` guards would wrap. */
    if (unlikely(size > PTRDIFF_MAX || align > PTRDIFF_MAX / 2))
        return malloc_fail();
    init_ensure();      /* settles the modes (valgrind) before the first block */
    void *p;
    if (unlikely(hooks_on()))
        p = hooks_alloc(size, align, op, site);
    else
        p = op == HOOK_CALLOC ? raw_calloc(size) : raw_alloc(size, align);
    /* Here, with every tally lock released: pthread_create's own calloc
     * comes back into tally (a resume under a shared heap's lock hung a
     * fork child on that lock). */
    background_resume();
    return p ? p : malloc_fail();
}

static NOINLINE void *malloc_slow(size_t size, const void *site)
{
    /* The fast path found nothing to take: straight to the heap's slow
     * path when the thread has a heap, where raw_alloc would go (the mmap
     * threshold is never below SMALL_MAX: init.h). The layers between
     * cost some 140 instructions a call: rssfoot, where one malloc in
     * seven comes here (its class's page out of free blocks at 94%
     * occupancy), ran 3.2% fewer instructions in all. A page's next run
     * is carved there too, under the heap's lock: whether another page
     * of the class has free blocks first is a look at the class's queue,
     * which another thread's malloc_trim may change meanwhile (heap.c,
     * heap_carve_current). A failure goes the general way, which frees
     * cached memory and tries again. */
    if (likely(size < __atomic_load_n(&malloc_fast_limit, __ATOMIC_RELAXED))) {
        struct heap *h = tls_heap;
        if (h != &heap_empty) {
            void *p = heap_alloc(h, sizeclass_of(size), false);
            if (likely(p != NULL)) {
                background_resume();
                return p;
            }
        }
    }
    return alloc_entry(size, MIN_ALIGN, HOOK_MALLOC, site);
}

/* What malloc hands out without a call, or NULL: the head of pg's free
 * list, else the next block of its fresh run (page.h) unless other
 * threads' frees wait: blocks that came back go out before fresh memory
 * (the slow path drains them). */
static ALWAYS_INLINE struct block *take_inline(struct heap *h, struct page *pg)
{
    struct block *b = page_try_pop(pg);
    if (likely(b != NULL))
        return b;
    if (page_has_fresh(pg) && heap_no_remote(h))
        return page_take_fresh(pg);
    return NULL;
}

/* take_inline, counted on the sweep tick (heap.h, HEAP_TICK), for the
 * lanes of the entry points other than malloc. (malloc spells it out:
 * written this way there, its small lane saved a register, 2 more
 * instructions a pair.) NULL as take_inline. */
static ALWAYS_INLINE void *take_counted(struct heap *h, struct page *pg)
{
    struct block *b = take_inline(h, pg);
    if (likely(b != NULL) && unlikely(--h->tick < 0))
        return heap_tick(h, b);
    return b;
}

/* malloc's small lane for the other entry points: a block of size's
 * class, or NULL (a mode is on, the size is not small, or the page has
 * nothing to hand out without a call). */
static ALWAYS_INLINE void *small_take(size_t size)
{
    struct heap *h = tls_heap;
    if (likely(size < malloc_fast_limit))          /* plain: see malloc */
        return take_counted(h, h->direct[(size + 15) >> 4]);
    return NULL;
}

EXPORT FAST_ENTRY void *malloc(size_t size)
{
    struct heap *h = tls_heap;
    /* A plain read: the compiler folds it into the compare (a relaxed
     * atomic load costs a separate instruction). A switch made by another
     * thread is seen a few calls late, which is all a mode switch needs;
     * the TSan run suppresses exactly these two reads (tests/sanitize). */
    if (likely(size < malloc_fast_limit)) {
        struct block *b = take_inline(h, h->direct[(size + 15) >> 4]);
        if (likely(b != NULL))
            return unlikely(--h->tick < 0) ? heap_tick(h, b) : b;
    } else if (size < malloc_medium_limit && size > SMALL_MAX) {
        /* A medium size (no direct[] slot): its class's current page, here,
         * without the layers between (a malloc+free pair of 50,000 B took
         * 206 instructions that way; 99 now, tcmalloc's 80). No mode is on
         * (the limit is not 0); a plain read, as above. The size test is
         * not redundant: the two limits are two reads, and a thread that
         * saw the first one shut (a mode on) and the second open (the mode
         * off again, or hooks_update between its two stores) came here
         * with a small size, which the class formula this lane used before
         * the table misfiled (100 B got an 80 B block, 16..64 B an index
         * far past current[]); the table would give it a 1..8 KiB class,
         * bigger than it needs. */
        unsigned e = init_lane_entry(size);
        if (!(e & INIT_LANE_SPAN)) {
            struct block *b = take_inline(h, h->current[e]);
            if (b != NULL)
                return unlikely(--h->tick < 0) ? heap_tick(h, b) : b;
        }
    }
    return malloc_slow(size, CALLER);
}

/* The rest of free_slow: NULL, a mode on, a debug block, a large block,
 * or a pointer to report. Apart, so that the foreign free keeps no frame
 * for its call of raw_free_plain. */
static NOINLINE void free_other_cases(void *p, const void *site)
{
    if (!p)
        return;
    if (unlikely(hooks_on()) || !raw_free_plain(p, "free"))
        hooks_free(p, site);
}

/* `seen` is what free's fast path compared with the thread's tag: the
 * block's map entry with the mode bit OR-ed in. */
static NOINLINE void free_slow(void *p, uint16_t seen, const void *site)
{
    /* First a block of the heap this thread adopts from (remote.h), which
     * is never NULL's tag, a mode's or the debug heap's. The pointer test
     * is the one below: a wild pointer's lookup wraps around the map. */
    if (seen == tls_adopt_tag && !((uintptr_t)p >> (SEGMAP_BITS + SEGMENT_SHIFT))) {
        remote_keep(seen, p, raw_checked_shape(segment_of(p), p, "free"));
        return;
    }
    /* Most frequent here: a block of another thread's heap while no mode
     * is on, which the fast path's lookup already names (1..MAX_HEAPS: the
     * mode bit lies above). Its tag is trusted where the map can hold the
     * pointer (bits above 46 clear: the fast path's lookup wraps the rest
     * around), as segmap_tag_checked would; looking it up again cost every
     * foreign free 8 instructions. (NULL's tag is 0, which wraps past
     * MAX_HEAPS: it goes to free_other_cases.) */
    if (likely((unsigned)seen - 1u < MAX_HEAPS &&
               !((uintptr_t)p >> (SEGMAP_BITS + SEGMENT_SHIFT)) &&
               seen != __atomic_load_n(&heap_debug_tag, __ATOMIC_RELAXED))) {
        raw_free_other(p, seen, "free");
        return;
    }
    free_other_cases(p, site);
}

EXPORT FAST_ENTRY void free(void *p)
{
    uint16_t seen = segmap_tag(p) | hooks_tag_mask;    /* plain: see malloc */
    if (likely(seen == tls_tag)) {
        struct segment *s = segment_of(p);
        struct page *pg = segment_slice_of(s, p);
        struct block *b = p;
        if (likely(pg->flags == PAGE_OPEN && b != pg->free)) {
            page_push_block(pg, b);
            return;
        }
        raw_free_own(p);   /* medium, full page or double free: no mode is on */
        return;
    }
    free_slow(p, seen, CALLER);
}

/* Whether p is a block of the caller's own heap and no mode is on: the
 * tag test of free's fast path (plain reads: see there), on the checked
 * lookup that every path but that one uses. */
static ALWAYS_INLINE bool own_block(const void *p)
{
    return (segmap_tag_checked(p) | hooks_tag_mask) == tls_tag;
}

/* Out of line, both, so that calloc's fast path saves no registers.
 * (calloc has its own copy of the small lane: with the tick's call inside
 * and the memset after it, `total` was kept in a saved register.) */
static NOINLINE void *calloc_slow(size_t total, const void *site)
{
    return alloc_entry(total, MIN_ALIGN, HOOK_CALLOC, site);
}

static NOINLINE void *calloc_ticked(struct heap *h, struct block *b, size_t total)
{
    return memset(heap_tick(h, b), 0, total);
}

/* A small calloc takes malloc's fast path, then clears what was asked
 * for: through alloc_entry, a calloc(1, 64)+free pair took 157
 * instructions against malloc's 53 (tcmalloc 125, jemalloc 147). While a
 * mode is on the limit is 0, and the hooks see HOOK_CALLOC as before. */
EXPORT FAST_ENTRY void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        return malloc_fail();
    struct heap *h = tls_heap;
    if (likely(total < malloc_fast_limit)) {       /* plain: see malloc */
        struct block *b = take_inline(h, h->direct[(total + 15) >> 4]);
        if (likely(b != NULL)) {
            if (unlikely(--h->tick < 0))
                return calloc_ticked(h, b, total);
            return memset(b, 0, total);
        }
    }
    return calloc_slow(total, CALLER);
}

/* realloc of a block of the caller's own heap while no mode is on: the
 * block is checked (raw_usable_own) as the general path checks it, and a
 * move takes malloc's and free's fast paths. Through the general path, a
 * malloc(100), realloc to 300 and free took 394 instructions (tcmalloc
 * 228): it looked the block up four times and allocated through the
 * heap's slow-path pop. A move that finds no memory leaves a shrinking
 * block where it is, as raw_realloc does (malloc has set errno). */
static NOINLINE void *realloc_own(void *p, size_t size)
{
    size_t usable = raw_usable_own(p, "realloc");
    if (raw_realloc_stays(usable, size))
        return p;
    void *q = raw_alloc_grown(size, usable);
    if (!q)
        q = malloc(size);
    if (unlikely(!q))
        return size <= usable ? p : NULL;
    memcpy(q, p, usable < size ? usable : size);
    free(p);
    return q;
}

static void *realloc_entry(void *p, size_t size, const void *site)
{
    if (!p) {
        /* malloc's small lane (a buffer's first growth: 141 instructions
         * a pair through alloc_entry); not malloc itself, which would
         * give the hooks its own caller, this function, as the site. */
        void *q = small_take(size);
        return q ? q : alloc_entry(size, MIN_ALIGN, HOOK_MALLOC, site);
    }
    if (size == 0) {            /* glibc: free and return NULL */
        /* free's test, and its slow path with realloc's caller for
         * the hooks (free itself would name this function). */
        uint16_t seen = segmap_tag(p) | hooks_tag_mask;
        if (seen == tls_tag)
            free(p);
        else
            free_slow(p, seen, site);
        return NULL;
    }
    if (size > PTRDIFF_MAX)
        return malloc_fail();
    if (own_block(p))
        return realloc_own(p, size);
    void *q;
    if (unlikely(hooks_on()) || raw_is_debug(p))
        q = hooks_realloc(p, size, site);
    else
        q = raw_realloc(p, size, "realloc");
    return q ? q : malloc_fail();
}

EXPORT void *realloc(void *p, size_t size) { return realloc_entry(p, size, CALLER); }

EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        return malloc_fail();
    return realloc_entry(p, total, CALLER);
}

static bool is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* An aligned request of a small or medium size while no mode is on:
 * popped as malloc pops, from the current page of the smallest class
 * whose blocks all have the alignment (current[] holds each class's own
 * page, never a pair's, so the block is of that class); NULL if that does
 * not apply. The medium limit is 0 while a mode is on, as the small one;
 * raw_aligned_class works the class out for any size, so a thread that
 * reads the limit late takes a block of the right class, only without
 * the hooks for a call or two (as every lane). The callers count the
 * block on the sweep tick after they have it, so that both calls they
 * may make are tail calls (posix_memalign stores it first): the lanes
 * keep no frame and save no register. Through the general entry,
 * aligned_alloc(64, 64)+free took 177 instructions (tcmalloc 93,
 * mimalloc 145), and posix_memalign(64, 100000)+free 232 (tcmalloc
 * 112). */
static ALWAYS_INLINE struct block *aligned_take(struct heap *h, size_t size, size_t align)
{
    size_t limit = malloc_medium_limit;             /* plain: see malloc */
    if (likely(size < limit) && (size <= SMALL_MAX || !(init_lane_entry(size) & INIT_LANE_SPAN))) {
        int cls = raw_aligned_class(size, align, limit - 1);
        if (likely(cls >= 0))
            return take_inline(h, h->current[cls]);
    }
    return NULL;
}

/* The aligned entries' general path, out of line: inlined, its registers
 * were saved and restored on their lanes too (up to six pushes and pops a
 * call). */
static NOINLINE void *aligned_slow(size_t size, size_t align, const void *site)
{
    return alloc_entry(size, align, HOOK_ALIGNED, site);
}

/* posix_memalign reports through its result and leaves errno as it was. */
static NOINLINE int posix_memalign_slow(void **out, size_t align, size_t size, const void *site)
{
    int saved = errno;
    void *p = aligned_slow(size, align, site);
    errno = saved;
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (!is_pow2(align) || align % sizeof(void *) != 0)
        return EINVAL;
    struct heap *h = tls_heap;
    struct block *b = aligned_take(h, size, align);
    if (unlikely(!b))
        return posix_memalign_slow(out, align, size, CALLER);
    *out = b;
    if (unlikely(--h->tick < 0))
        heap_tick(h, b);
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (!is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    /* memalign_entry's lane, spelled out: through a helper taking the
     * site, CALLER was read at entry, an instruction more on the lane. */
    struct heap *h = tls_heap;
    struct block *b = aligned_take(h, size, align);
    if (unlikely(!b))
        return aligned_slow(size, align, CALLER);
    return unlikely(--h->tick < 0) ? heap_tick(h, b) : b;
}

static void *memalign_entry(size_t align, size_t size, const void *site)
{
    if (align > SIZE_MAX / 2 + 1) {     /* as glibc: no power of two to round up to */
        errno = EINVAL;
        return NULL;
    }
    while (!is_pow2(align))     /* glibc rounds odd alignments up */
        align = align ? (align | (align - 1)) + 1 : 1;
    struct heap *h = tls_heap;
    struct block *b = aligned_take(h, size, align);
    if (unlikely(!b))
        return aligned_slow(size, align, site);
    return unlikely(--h->tick < 0) ? heap_tick(h, b) : b;
}

EXPORT void *memalign(size_t align, size_t size) { return memalign_entry(align, size, CALLER); }

EXPORT void *valloc(size_t size) { return memalign_entry(OS_PAGE, size, CALLER); }

EXPORT void *pvalloc(size_t size)
{
    if (size > PTRDIFF_MAX)
        return malloc_fail();
    return memalign_entry(OS_PAGE, size ? align_up(size, OS_PAGE) : OS_PAGE, CALLER);
}

EXPORT size_t malloc_usable_size(void *p)
{
    if (!p)
        return 0;
    /* A block of the caller's own heap, no mode on: one checked lookup
     * (redis built on glibc's malloc asks through zmalloc_size on every
     * allocation and free, for its memory accounting). */
    if (own_block(p))
        return raw_usable_own(p, "malloc_usable_size");
    if (hooks_on() || raw_is_debug(p))
        return hooks_usable_size(p);
    return raw_usable_size(p, "malloc_usable_size");
}

EXPORT void free_sized(void *p, size_t size)
{
    (void)size;
    free(p);
}

EXPORT void free_aligned_sized(void *p, size_t align, size_t size)
{
    (void)align;
    (void)size;
    free(p);
}

/* glibc's own names for the family. A program or library that calls them
 * directly (an interposer, an old profiler, a binary built against glibc's
 * `cfree`) must reach the same heap as malloc and free: otherwise a block
 * crosses allocators and the other one's free aborts on it, or corrupts
 * it. Each is a tail call. */
EXPORT void *__libc_malloc(size_t size) { return malloc(size); }
EXPORT void __libc_free(void *p) { free(p); }
EXPORT void *__libc_calloc(size_t n, size_t size) { return calloc(n, size); }
EXPORT void *__libc_realloc(void *p, size_t size) { return realloc(p, size); }
EXPORT void *__libc_memalign(size_t align, size_t size) { return memalign(align, size); }
EXPORT void *__libc_valloc(size_t size) { return valloc(size); }
EXPORT void *__libc_pvalloc(size_t size) { return pvalloc(size); }
void cfree(void *p);    /* glibc dropped the declaration, not the symbol */
EXPORT void cfree(void *p) { free(p); }

EXPORT int malloc_trim(size_t pad)
{
    (void)pad;
    init_ensure();
    return heap_trim() ? 1 : 0;
}

/* M_MMAP_THRESHOLD maps onto tally's option. The rest of glibc's tuning
 * (arenas, trimming, fastbins, perturbation) has no meaning here and is
 * accepted and ignored with 1, as glibc answers them and any unknown
 * parameter: a program that checks the result must not take tally for a
 * failure. Like glibc, an M_MXFAST beyond its fastbins' reach is refused. */
EXPORT int mallopt(int param, int value)
{
    init_ensure();          /* the option feeds malloc's medium lane (hooks_update) */
    if (param == M_MMAP_THRESHOLD)
        return value >= 0 && options_set_value(OPT_MMAP_THRESHOLD, (uint64_t)value) == 0;
    if (param == M_MXFAST)
        return value >= 0 && value <= 80 * (int)sizeof(size_t) / 4;
    return 1;
}

EXPORT struct mallinfo2 mallinfo2(void)
{
    struct usage u;
    usage_read(&u, false);
    struct mallinfo2 mi = {
        .arena = u.segment_bytes,
        .ordblks = u.free_blocks,
        .hblks = u.large_count,
        .hblkhd = u.large_bytes,
        .uordblks = u.allocated_bytes,
        .fordblks = u.segment_bytes - u.allocated_bytes,
    };
    return mi;
}

static int clamp_int(size_t v) { return v > INT32_MAX ? INT32_MAX : (int)v; }

EXPORT struct mallinfo mallinfo(void)
{
    struct mallinfo2 m = mallinfo2();
    struct mallinfo mi = {
        .arena = clamp_int(m.arena),
        .ordblks = clamp_int(m.ordblks),
        .hblks = clamp_int(m.hblks),
        .hblkhd = clamp_int(m.hblkhd),
        .uordblks = clamp_int(m.uordblks),
        .fordblks = clamp_int(m.fordblks),
    };
    return mi;
}
