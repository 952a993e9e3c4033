/*
 * hooks.c - the dispatch alloc/ calls while any mode is on: timing around
 * the call, debug or plain allocation inside it, user callbacks after it.
 *
 * Re-entry: a user callback, backtrace() or dladdr() may call malloc. A
 * thread-local flag sends such nested calls straight to the plain
 * allocator, so they are neither instrumented nor reported to the user's
 * hooks, and never recurse.
 */
#include "hooks.h"
#include "debug.h"
#include "timing.h"
#include "options.h"
#include "report.h"
#include "valgrind.h"
#include "../alloc/raw.h"
#include "../alloc/os.h"
#include "../alloc/sizeclass.h"
#include "../alloc/init.h"
#include "../include/tally.h"

#include <errno.h>
#include <string.h>

/* 0 until start-up has set up the empty heap that new threads begin on;
 * hooks_update opens it. */
HIDDEN size_t malloc_fast_limit;
HIDDEN size_t malloc_medium_limit;
HIDDEN uint16_t hooks_tag_mask;

static __thread bool tls_in_hook TLS_IE;
static const struct tally_hooks *user_hooks;   /* __atomic_* access only */

/* Updates begun so far. Two threads changing options at once (one turns
 * debug on while another calls mallopt) could otherwise store their
 * results in the wrong order and leave the fast paths open with debug on:
 * each caller stored its option before counting itself in, and goes again
 * if another update began while it ran, so the last stores read every
 * option stored before them. */
static unsigned update_count;

static void hooks_apply(void)
{
    bool debug = option(OPT_DEBUG), timing = option(OPT_TIMING);
    bool user = __atomic_load_n(&user_hooks, __ATOMIC_ACQUIRE) != NULL;
    if (debug)
        debug_enable();
    if (timing)
        timing_enable();
    else
        __atomic_store_n(&os_time_calls, false, __ATOMIC_RELAXED);
    if (debug || timing || option(OPT_STATS))
        report_prepare();
    bool on = debug || timing || user || vg_running() || option(OPT_SECURE);
    init_lanes_changed();       /* the threshold may have moved */
    __atomic_store_n(&malloc_fast_limit, on ? 0 : (size_t)SMALL_MAX + 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&malloc_medium_limit, on ? 0 : init_mmap_threshold() + 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&hooks_tag_mask, on ? HOOKS_TAG_BIT : 0, __ATOMIC_SEQ_CST);
}

void hooks_update(void)
{
    unsigned mine = __atomic_add_fetch(&update_count, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        hooks_apply();
        unsigned now = __atomic_load_n(&update_count, __ATOMIC_SEQ_CST);
        if (now == mine)
            return;
        mine = now;
    }
}

void hooks_fork_prepare(void)
{
    debug_fork_prepare();
    timing_fork_prepare();
}

void hooks_fork_parent(void)
{
    timing_fork_parent();
    debug_fork_parent();
}

void hooks_fork_child(void)
{
    timing_fork_child();
    debug_fork_child();
}

static COLD_TEXT void *plain_alloc(size_t size, size_t align, enum hook_op op)
{
    return op == HOOK_CALLOC ? raw_calloc(size) : raw_alloc(size, align);
}

static COLD_TEXT void free_any(void *p, const void *site)
{
    if (!raw_free_plain(p, "free"))
        debug_free(p, site);
}

static COLD_TEXT void *realloc_any(void *p, size_t size, const void *site)
{
    if (option(OPT_DEBUG) || raw_is_debug(p))
        return debug_realloc(p, size, site);
    return raw_realloc(p, size, "realloc");
}

/* Allocation proper for an outermost call: debug or plain, timed when
 * asked. (Nested calls, from a hook, backtrace or dladdr, go plain.) */
static COLD_TEXT void *alloc_inner(size_t size, size_t align, enum hook_op op, const void *site)
{
    bool timing = option(OPT_TIMING);
    struct timing_mark m;
    if (timing)
        timing_begin(&m);
    void *p = option(OPT_DEBUG) ? debug_alloc(size, align, op == HOOK_CALLOC, site)
                                : plain_alloc(size, align, op);
    if (timing)
        timing_end(&m, op, size);
    return p;
}

static COLD_TEXT size_t usable(void *p)
{
    return raw_is_debug(p) ? debug_usable_size(p) : raw_usable_size(p, "malloc_usable_size");
}

/* The size a timed free is filed under, read before the free checks p:
 * a misuse must be reported by free itself ("free(): double free"), not
 * as a malloc_usable_size() the program never made. */
static COLD_TEXT size_t free_size(void *p)
{
    return raw_is_debug(p) ? debug_live_size(p) : raw_usable_size(p, "free");
}

COLD_TEXT void *hooks_alloc(size_t size, size_t align, enum hook_op op, const void *site)
{
    bool outer = !tls_in_hook, vg = vg_running();
    tls_in_hook = true;
    if (vg)
        vg_quiet_begin();
    void *p = outer ? alloc_inner(size, align, op, site) : plain_alloc(size, align, op);
    if (vg) {
        size_t n = p ? usable(p) : 0;
        vg_quiet_end();
        vg_alloc(p, n, op == HOOK_CALLOC);
    }
    const struct tally_hooks *u = __atomic_load_n(&user_hooks, __ATOMIC_ACQUIRE);
    if (outer && u && u->on_alloc && p)
        u->on_alloc(p, size, u->ctx);
    tls_in_hook = !outer;
    return p;
}

COLD_TEXT void hooks_free(void *p, const void *site)
{
    bool outer = !tls_in_hook, vg = vg_running();
    tls_in_hook = true;
    const struct tally_hooks *u = __atomic_load_n(&user_hooks, __ATOMIC_ACQUIRE);
    if (outer && u && u->on_free)
        u->on_free(p, u->ctx);
    if (vg) {
        vg_free(p);
        vg_quiet_begin();
    }
    if (outer && option(OPT_TIMING)) {
        size_t size = free_size(p);
        struct timing_mark m;
        timing_begin(&m);
        free_any(p, site);
        timing_end(&m, HOOK_FREE, size);
    } else {
        free_any(p, site);
    }
    if (vg)
        vg_quiet_end();
    tls_in_hook = !outer;
}

/* Under valgrind, realloc is always allocate-copy-free, so memcheck sees
 * each block's whole life. */
static COLD_TEXT void *realloc_for_valgrind(void *p, size_t size, const void *site)
{
    vg_quiet_begin();
    size_t old = usable(p);
    vg_quiet_end();
    void *q = hooks_alloc(size, MIN_ALIGN, HOOK_MALLOC, site);
    if (q) {
        memcpy(q, p, old < size ? old : size);
        hooks_free(p, site);
    } else if (size <= old) {
        /* A shrink never fails (raw_realloc): p holds the new size as it
         * is, and memcheck's record of it stays true. */
        q = p;
    }
    return q;
}

COLD_TEXT void *hooks_realloc(void *p, size_t size, const void *site)
{
    if (vg_running())
        return realloc_for_valgrind(p, size, site);
    if (tls_in_hook)
        return realloc_any(p, size, site);
    tls_in_hook = true;
    void *q;
    if (option(OPT_TIMING)) {
        struct timing_mark m;
        timing_begin(&m);
        q = realloc_any(p, size, site);
        timing_end(&m, HOOK_REALLOC, size);
    } else {
        q = realloc_any(p, size, site);
    }
    const struct tally_hooks *u = __atomic_load_n(&user_hooks, __ATOMIC_ACQUIRE);
    if (u && u->on_realloc && q)
        u->on_realloc(p, q, size, u->ctx);
    tls_in_hook = false;
    return q;
}

COLD_TEXT size_t hooks_usable_size(void *p)
{
    if (!vg_running())
        return usable(p);
    vg_quiet_begin();
    size_t n = usable(p);
    vg_quiet_end();
    return n;
}

/* Each call publishes a fresh copy, never freed: a thread may still be
 * inside the previous callbacks, and setting hooks is rare. */
__attribute__((visibility("default"))) int tally_hooks_set(const struct tally_hooks *hooks)
{
    init_ensure();              /* hooks_update must not open the fast path first */
    if (hooks && hooks->size < offsetof(struct tally_hooks, ctx) + sizeof(void *)) {
        errno = EINVAL;
        return -1;
    }
    struct tally_hooks *copy = NULL;
    if (hooks) {
        copy = os_map(OS_PAGE);
        if (!copy) {
            errno = ENOMEM;
            return -1;
        }
        memcpy(copy, hooks, hooks->size < sizeof *copy ? hooks->size : sizeof *copy);
    }
    __atomic_store_n(&user_hooks, copy, __ATOMIC_RELEASE);
    hooks_update();
    return 0;
}
