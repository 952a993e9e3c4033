/*
 * hooks.h - the single door from alloc/ into instrument/.
 *
 * alloc/ reads two variables on its fast paths and calls the hooks_*
 * functions only from its slow paths when hooks_on() says a mode is on
 * (or, for frees, when the block is a debug block). The hooks see plain
 * values (pointer, size, alignment, call site), never heap or page structs.
 */
#ifndef TALLY_HOOKS_H
#define TALLY_HOOKS_H

#include "../alloc/internal.h"

/* malloc's fast path serves size < malloc_fast_limit: SMALL_MAX + 1, or 0
 * before start-up and while a mode is on; its medium lane serves size <
 * malloc_medium_limit: the mmap threshold + 1, or 0 at the same times (one
 * compare instead of clamping the option and testing the first limit),
 * but for the sizes init_medium_lane marks as span blocks.
 * free's fast path ORs hooks_tag_mask into the block's tag: 0, or
 * HOOKS_TAG_BIT while a mode is on. */
extern HIDDEN size_t malloc_fast_limit;
extern HIDDEN size_t malloc_medium_limit;
extern HIDDEN uint16_t hooks_tag_mask;

static inline bool hooks_on(void)
{
    return __atomic_load_n(&hooks_tag_mask, __ATOMIC_RELAXED) != 0;
}

enum hook_op { HOOK_MALLOC, HOOK_CALLOC, HOOK_ALIGNED, HOOK_REALLOC, HOOK_FREE, HOOK_OPS };

HIDDEN void *hooks_alloc(size_t size, size_t align, enum hook_op op, const void *site);
HIDDEN void hooks_free(void *p, const void *site);
HIDDEN void *hooks_realloc(void *p, size_t size, const void *site);
HIDDEN size_t hooks_usable_size(void *p);

/* The instrumentation's locks around fork(), from alloc/init.c's
 * handlers: taken before the allocator's, released after them. A fork
 * while another thread held one (timing's calibration, tally_check) left
 * the child to hang on it. */
HIDDEN void hooks_fork_prepare(void);
HIDDEN void hooks_fork_parent(void);
HIDDEN void hooks_fork_child(void);

/* Recomputes the fast-path variables from the options and user hooks;
 * callers store what they change first. Concurrent callers end with the
 * variables of the last options. Precondition: start-up has run
 * (init_ensure). */
HIDDEN void hooks_update(void);

#endif
