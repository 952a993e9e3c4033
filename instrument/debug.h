/*
 * debug.h - debug mode: fences, junk and poison, quarantine, misuse
 * reports, leak reports. Debug blocks come from alloc's raw_alloc_debug(),
 * so they are recognised (and checked) even after debug mode is switched
 * off; blocks allocated while it was off carry no debug metadata and are
 * freed as usual.
 */
#ifndef TALLY_DEBUG_H
#define TALLY_DEBUG_H

#include "../alloc/internal.h"

HIDDEN void debug_enable(void);
/* debug_lock around fork() (hooks_fork_*): tally_check takes it whether or
 * not debug was ever on. */
HIDDEN void debug_fork_prepare(void);
HIDDEN void debug_fork_parent(void);
HIDDEN void debug_fork_child(void);
HIDDEN bool debug_was_used(void);
HIDDEN size_t debug_live_blocks(void);
HIDDEN void *debug_alloc(size_t size, size_t align, bool zero, const void *site);
/* Precondition: raw_is_debug(p). */
HIDDEN void debug_free(void *p, const void *site);
/* p may be a debug block or a plain one (allocated before debug was on). */
HIDDEN void *debug_realloc(void *p, size_t size, const void *site);
HIDDEN size_t debug_usable_size(void *p);
/* The requested size of a live debug block, or 0 when p is not one; no
 * report (for a caller whose next step checks p and reports itself).
 * Precondition: raw_is_debug(p). */
HIDDEN size_t debug_live_size(void *p);

#endif
