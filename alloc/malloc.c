/*
 * malloc.c - the exported malloc family: fast paths and their _slow twins.
 *
 * Call tree:
 *   malloc ──fast──> tls heap -> current page of the class -> pop
 *          └─slow──> alloc_any -> large_alloc | heap_alloc -> heap_alloc_slow
 *   free   ──fast──> segmap tag == my heap's tag -> page -> push
 *          └─slow──> NULL | foreign (abort) | large | full page | remote push
 * This is the only file that sets errno. Internally, failure is NULL.
 */
#define _GNU_SOURCE
#include "heap.h"
#include "large.h"
#include "init.h"
#include "diag.h"
#include "usage.h"
#include "../instrument/options.h"

#include <errno.h>
#include <malloc.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static void *alloc_in_class(unsigned cls)
{
    struct heap *h = heap_get();
    return h ? heap_alloc(h, cls) : heap_alloc_orphan(cls);
}

/* Any size up to PTRDIFF_MAX; NULL when out of memory. */
static void *alloc_any(size_t size)
{
    if (size > init_mmap_threshold())
        return large_alloc(size, MIN_ALIGN);
    return alloc_in_class(sizeclass_of(size));
}

/* Precondition: align is a power of two. Small and medium blocks whose
 * class size is a multiple of align are naturally aligned (page starts are
 * 8 KiB-aligned, medium ones 64 KiB), so no block ever starts inside
 * another; beyond that a large mapping places the block at `align`. */
static void *alloc_aligned(size_t size, size_t align)
{
    if (align <= MIN_ALIGN)
        return alloc_any(size);
    if (size > PTRDIFF_MAX - align)
        return NULL;
    size_t need = size < align ? align : size;
    size_t limit = init_mmap_threshold();
    if (need <= limit && align <= MEDIUM_HEADER) {
        for (unsigned cls = sizeclass_of(need); cls < NUM_CLASSES; cls++) {
            size_t bs = sizeclass_block_size[cls];
            if (bs > limit)
                break;
            if (bs % align == 0 && (cls >= NUM_SMALL_CLASSES || align <= SMALL_HEADER))
                return alloc_in_class(cls);
        }
    }
    return large_alloc(size, align);
}

static void *malloc_fail(void)
{
    errno = ENOMEM;
    return NULL;
}

static NOINLINE void *malloc_slow(size_t size)
{
    if (unlikely(size > PTRDIFF_MAX))
        return malloc_fail();
    void *p = alloc_any(size);
    return p ? p : malloc_fail();
}

EXPORT void *malloc(size_t size)
{
    struct heap *h = tls_heap;
    if (likely(size <= SMALL_MAX)) {
        struct page *pg = h->direct[(size + 15) >> 4];
        struct block *b = pg->free;
        if (likely(b != NULL)) {
            pg->free = b->next;
            pg->used++;
            return b;
        }
    }
    return malloc_slow(size);
}

/* The page of a small or medium block, after checking that p is the start
 * of a block in a page that is in use. */
static struct page *checked_page(void *p, const char *func)
{
    struct page *pg = segment_page_of(segment_of(p), p);
    uintptr_t off = (uintptr_t)p - (uintptr_t)pg->start;
    if (!pg->in_use || (uintptr_t)p < (uintptr_t)pg->start || off % pg->block_size != 0 ||
        off / pg->block_size >= pg->reserved)
        diag_fail(func, "invalid pointer (not the start of a block)", p);
    return pg;
}

static NOINLINE void free_slow(void *p)
{
    if (!p)
        return;
    uint16_t tag = segmap_tag(p);
    if (tag == TAG_NONE)
        diag_fail("free", "invalid pointer (not allocated by tally, or already freed)", p);
    if (tag >= TAG_LARGE_TAIL) {
        large_free(p, "free");
        return;
    }
    struct page *pg = checked_page(p, "free");
    if (tag == tls_tag)
        heap_free_owned_slow(tls_heap, pg, p);
    else
        heap_free_remote(heap_table[tag], p);
}

EXPORT void free(void *p)
{
    if (likely(segmap_tag(p) == tls_tag)) {
        struct segment *s = segment_of(p);
        struct page *pg = segment_slice_of(s, p);
        struct block *b = p;
        if (likely(pg->flags == 0 && b != pg->free)) {
            b->next = pg->free;
            pg->free = b;
            pg->used--;
            return;
        }
    }
    free_slow(p);
}

EXPORT void *calloc(size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total) || total > PTRDIFF_MAX)
        return malloc_fail();
    void *p = alloc_any(total);
    if (!p)
        return malloc_fail();
    /* A large block is a fresh mapping, already zero. */
    if (total <= init_mmap_threshold())
        memset(p, 0, total);
    return p;
}

static size_t usable_size(void *p, const char *func)
{
    uint16_t tag = segmap_tag(p);
    if (tag == TAG_NONE)
        diag_fail(func, "invalid pointer (not allocated by tally, or already freed)", p);
    if (tag >= TAG_LARGE_TAIL)
        return large_usable_size(p, func);
    return checked_page(p, func)->block_size;
}

static void *realloc_move(void *p, size_t old_usable, size_t size)
{
    void *q = alloc_any(size);
    if (!q)
        return malloc_fail();
    memcpy(q, p, old_usable < size ? old_usable : size);
    free(p);
    return q;
}

EXPORT void *realloc(void *p, size_t size)
{
    if (!p)
        return malloc(size);
    if (size == 0) {            /* glibc: free and return NULL */
        free(p);
        return NULL;
    }
    if (size > PTRDIFF_MAX)
        return malloc_fail();
    size_t usable = usable_size(p, "realloc");
    if (segmap_tag(p) >= TAG_LARGE_TAIL) {
        if (size <= init_mmap_threshold())
            return realloc_move(p, usable, size);
        void *q = large_realloc(p, size);
        return q ? q : malloc_fail();
    }
    /* Stay put unless the block is too small or more than half wasted. */
    if (size <= usable && (size > usable / 2 || usable <= 64))
        return p;
    return realloc_move(p, usable, size);
}

EXPORT void *reallocarray(void *p, size_t n, size_t size)
{
    size_t total;
    if (__builtin_mul_overflow(n, size, &total))
        return malloc_fail();
    return realloc(p, total);
}

static bool is_pow2(size_t x) { return x && !(x & (x - 1)); }

EXPORT int posix_memalign(void **out, size_t align, size_t size)
{
    if (!is_pow2(align) || align % sizeof(void *) != 0)
        return EINVAL;
    void *p = size > PTRDIFF_MAX ? NULL : alloc_aligned(size, align);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t size)
{
    if (!is_pow2(align)) {
        errno = EINVAL;
        return NULL;
    }
    void *p = size > PTRDIFF_MAX ? NULL : alloc_aligned(size, align);
    return p ? p : malloc_fail();
}

EXPORT void *memalign(size_t align, size_t size)
{
    if (align > ((size_t)1 << 62)) {
        errno = EINVAL;
        return NULL;
    }
    while (!is_pow2(align))     /* glibc rounds odd alignments up */
        align = align ? (align | (align - 1)) + 1 : 1;
    void *p = size > PTRDIFF_MAX ? NULL : alloc_aligned(size, align);
    return p ? p : malloc_fail();
}

EXPORT void *valloc(size_t size) { return memalign(OS_PAGE, size); }

EXPORT void *pvalloc(size_t size)
{
    if (size > PTRDIFF_MAX)
        return malloc_fail();
    return memalign(OS_PAGE, size ? align_up(size, OS_PAGE) : OS_PAGE);
}

EXPORT size_t malloc_usable_size(void *p)
{
    return p ? usable_size(p, "malloc_usable_size") : 0;
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

EXPORT int malloc_trim(size_t pad)
{
    (void)pad;
    init_ensure();
    return heap_trim() ? 1 : 0;
}

/* M_MMAP_THRESHOLD maps onto tally's option; everything else about glibc's
 * arenas has no meaning here, so it is refused with 0 as glibc refuses an
 * unknown parameter. */
EXPORT int mallopt(int param, int value)
{
    if (param == M_MMAP_THRESHOLD && value >= 0) {
        __atomic_store_n(&options_value[OPT_MMAP_THRESHOLD], (uint64_t)value, __ATOMIC_RELAXED);
        return 1;
    }
    return 0;
}

EXPORT struct mallinfo2 mallinfo2(void)
{
    struct usage u;
    usage_read(&u);
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
