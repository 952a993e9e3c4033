/*
 * raw.h - the allocator proper, without hooks or errno: what the exported
 * entry points call on their slow paths, and what the instrumentation layer
 * calls underneath its own bookkeeping.
 *
 * Every function returns NULL on failure and aborts (through diag_fail) on
 * a pointer that tally did not hand out; `func` names the public function
 * in that report.
 */
#ifndef TALLY_RAW_H
#define TALLY_RAW_H

#include "internal.h"
#include "init.h"
#include "segment.h"
#include "sizeclass.h"
#include "diag.h"

/* Precondition for all: size <= PTRDIFF_MAX; align is a power of two. */
HIDDEN void *raw_alloc(size_t size, size_t align);
HIDDEN void *raw_calloc(size_t size);
HIDDEN void raw_free(void *p, const char *func);
/* raw_free(), unless p is a debug block (raw_is_debug): false then, with
 * nothing freed, for the hooks to free it. The block is looked up once:
 * raw_is_debug and then raw_free took a span block's free through its
 * header twice (about 110 instructions of its 700). */
HIDDEN bool raw_free_plain(void *p, const char *func);
/* The same for a tag known not to be the caller's heap's (free's slow
 * path, which its fast path's tag test sends only those). */
HIDDEN void raw_free_other(void *p, uint16_t tag, const char *func);
/* free() of a block of the caller's own heap (no mode on) that free's fast
 * path refused: checked, then on its page's list (a medium block, one of a
 * full page) or reported (a double free at the list's head). */
HIDDEN void raw_free_own(void *p);
/* The smallest class whose blocks are all aligned to `align`, with none
 * above `limit` (the mmap threshold, init_mmap_threshold()): its size is
 * a multiple of align, and its pages start on a boundary at least as
 * aligned (small pages on 8 KiB, medium pages on 64 KiB). -1 if none.
 * Precondition: align is a power of two (the entry points see to it).
 * Inline: malloc.c's aligned lanes call it, and a call kept their
 * arguments in saved registers (posix_memalign(64, 100000)+free: 149
 * instructions with the call, 143 without); they pass the limit they
 * read already (137). */
static inline int raw_aligned_class(size_t size, size_t align, size_t limit)
{
    size_t need = size < align ? align : size;
    if (need > limit || align > MEDIUM_HEADER)
        return -1;
    for (unsigned cls = sizeclass_of(need); cls < NUM_CLASSES; cls++) {
        size_t bs = sizeclass_block_size[cls];
        if (bs > limit)
            break;
        if ((bs & (align - 1)) == 0 && (cls >= NUM_SMALL_CLASSES || align <= SMALL_HEADER))
            return (int)cls;
    }
    return -1;
}
HIDDEN void *raw_realloc(void *p, size_t size, const char *func);
HIDDEN size_t raw_usable_size(void *p, const char *func);
/* raw_usable_size of a block of the caller's own heap (its tag is the
 * thread's): checked against its page's shape, reported if it is not the
 * start of a block. */
HIDDEN size_t raw_usable_own(void *p, const char *func);

/* realloc's policy for a small or medium block of `usable` bytes: stay
 * put unless the block is too small or more than half wasted. */
static inline bool raw_realloc_stays(size_t usable, size_t size)
{
    return size <= usable && (size > usable / 2 || usable <= 64);
}

/* A block of at least RAW_GROWN_LARGE bytes that realloc grows goes to a
 * mapping of its own (large.c) even below the mmap threshold: the steps
 * after it then move page tables or grow in place instead of copying the
 * block into each bigger class (a buffer doubling to 8 MiB copied 512
 * KiB more a round; bufgrow in docs/benchmarks.md). glibc's realloc maps
 * blocks that size too, its mmap threshold rising only with what a
 * program frees. So does any block realloc grows past init_large_from()
 * (a span run, marked LARGE_GROWN: its next growth to SPAN_REGROW_MAX or
 * more maps). Returns that
 * block, or NULL when the rule does not apply or the mapping was refused:
 * the caller allocates as before. */
#define RAW_GROWN_LARGE (256u * 1024u)
HIDDEN void *raw_alloc_grown(size_t size, size_t usable);

/* Debug blocks: `size` bytes at the returned pointer, with `front` bytes
 * before it (front is a multiple of 16) that belong to the caller. They
 * come from the debug heap or a flagged large mapping, so raw_is_debug()
 * recognises them whatever mode is on when they are freed. */
HIDDEN void *raw_alloc_debug(size_t size, size_t align, size_t front);
HIDDEN bool raw_is_debug(const void *p);
/* Frees a debug block by the pointer raw_alloc_debug() returned. */
HIDDEN void raw_free_debug(void *p);
/* Start of the debug-heap block containing p, or NULL if p is not in one. */
HIDDEN void *raw_debug_block_of(const void *p);

/* The shape of a small or medium block's page, after checking that p is
 * the start of a block in a page that is in use. (p below the page start
 * wraps off around to a huge value and fails the bound.) The shape, not
 * the page descriptor: the check may run on any thread. Inlined: every
 * free of another thread's block passes here (raw.c, and free's slow path
 * for a kept one). */
static ALWAYS_INLINE const struct page_shape *raw_checked_shape(struct segment *s, const void *p,
                                                                const char *func)
{
    const struct page_shape *sh = segment_shape_of(s, p);
    uintptr_t off = (uintptr_t)p - (uintptr_t)sh->start;
    uint16_t reserved = __atomic_load_n(&sh->reserved, __ATOMIC_RELAXED);
    if (!sh->in_use || off >= (uintptr_t)reserved * sh->block_size ||
        sizeclass_div((uint32_t)off, sh->cls) * sh->block_size != off)
        diag_fail(func, "invalid pointer (not the start of a block)", p);
    return sh;
}

#endif
