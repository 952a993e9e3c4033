/*
 * heap.h - the per-thread heap: fast-path state, slow paths, the drain of
 * remote frees, purging, and the life cycle of heaps across thread exit
 * and fork.
 *
 * Ownership: a heap is touched by exactly one thread at a time (its owner,
 * or whoever holds a shared heap's lock), except `remote_bufs` and
 * `remote`, the lock-free stacks other threads push freed blocks onto
 * (remote.h). Heap structs are never unmapped, so a remote freer can always
 * push, even onto a heap whose thread has exited (it is drained when a new
 * thread adopts the heap).
 */
#ifndef TALLY_HEAP_H
#define TALLY_HEAP_H

#include "page.h"
#include "sizeclass.h"
#include "span_keep.h"

#include <stdatomic.h>

enum heap_state { HEAP_ACTIVE = 1, HEAP_ABANDONED, HEAP_ZOMBIE, HEAP_SHARED };
enum shared_heap_id { SHARED_ORPHAN, SHARED_DEBUG, SHARED_COUNT };

#define DIRECT_SLOTS (SMALL_MAX / 16 + 1)

struct heap {
    /* Fast-path mallocs and slow-path frees before it looks at the clock.
     * First, on the OS page of direct[]'s first 511 slots: after direct[]
     * it lay on the heap's second page, and a malloc after a system call
     * (the kernel's page-table switch empties the TLB on this guest) took
     * a TLB miss more than it needs (valgrind's lackey: 9 data pages for
     * a 256 B malloc, 8 now; glibc's 7). */
    int32_t tick;
    /* direct[(size + 15) / 16] is the current page of size's class, so the
     * fast path needs no class lookup; current[] is the same by class. */
    struct page *direct[DIRECT_SLOTS];
    struct page *current[NUM_CLASSES];
    uint16_t tag;
    uint8_t state;
    /* Held by the owner around its slow paths, and by another thread's
     * malloc_trim while it gives back this heap's empty pages (heap.c,
     * heap_trim_other). */
    uint8_t trim_lock;
    uint16_t pages_taken;                 /* pages set up for a class, while young */
    uint8_t last_took;                    /* enum segment_kind of the page the
                                             heap took last (heap.c) */
    uint64_t next_collect_ms;
    uint64_t next_small_sweep_ms;
    uint64_t last_sweep_ms;               /* atomic: other threads read it */
    uint64_t trim_epoch;
    struct page_queue queue[NUM_CLASSES]; /* pages with room, per class */
    struct page_queue retired[2];         /* empty pages, oldest first */
    /* The page of each class that retired last, while it stays retired:
     * heap_retired_page takes it back without walking the list (a walk over
     * medium pages touches one segment header each). */
    struct page *retired_of[NUM_CLASSES];
    /* Blocks each small class borrowed since it last had a page of its
     * own as its current page (heap.c, heap_borrow). */
    uint8_t borrowed[NUM_SMALL_CLASSES];
    struct segment *segments;             /* every segment this heap owns */
    struct heap *pool_next;
    /* The thread's last freed span runs (span_keep.h). */
    struct span_keep keep;
    /* Other threads' frees (remote.h): transfer buffers, and single blocks
     * when no buffer could be had. Their own cache line. */
    _Alignas(64) _Atomic(struct remote_buf *) remote_bufs;
    _Atomic(struct block *) remote;
    char pad[64 - 2 * sizeof(void *)];
    /* Adopted blocks of other heaps, per small class (remote.h): `free` is
     * the list, `used` counts takes (by the fast path), `touched` counts
     * blocks put on it, `swept_used` is `used` at the last sweep; the other
     * fields stay 0. A kept list that holds blocks is its class's current
     * page, except while it holds fewer than HEAP_KEPT_SWITCH and the
     * current page has blocks on its own list and nothing left to carve
     * (heap_keep); the slow path switches to it when that list runs dry.
     * Nothing else sets the current page while it is current and holds
     * any. Last, most of them on the struct's third OS page (heaps start
     * on a page, heap_life.c): only a heap that keeps other heaps' blocks
     * writes there, so a thread that never does holds two pages of its
     * heap, not three. */
    struct page kept[NUM_SMALL_CLASSES];
};

extern HIDDEN struct page page_empty;
extern HIDDEN struct heap heap_empty;
extern HIDDEN struct heap *heap_table[MAX_HEAPS + 1];
/* The debug heap's tag once it exists; TAG_EMPTY (matches no block) before. */
extern HIDDEN uint16_t heap_debug_tag;
extern HIDDEN __thread struct heap *tls_heap TLS_IE;
extern HIDDEN __thread uint16_t tls_tag TLS_IE;

HIDDEN struct heap *heap_get(void);
/* Sweeps run on the slow paths, and a thread whose mallocs all stayed on
 * the fast path (a server after a peak, serving small requests from its
 * current pages) never gave back what it had freed: redis after FLUSHALL
 * kept 198 MB. So every HEAP_TICK blocks the fast path hands out, it
 * takes heap_tick, which sweeps when a sweep is due and returns b. The
 * frees that take the slow path (medium blocks, a full page's first) count
 * too (raw.c, free_owned). */
#define HEAP_TICK 256
HIDDEN void *heap_tick(struct heap *h, void *b);
HIDDEN void heap_set_current(struct heap *h, unsigned cls, struct page *pg);
/* A heap is young, its small classes in pairs (heap.c), until it has set
 * up this many pages for a class or keeps another heap's blocks. */
#define HEAP_YOUNG_PAGES 24
static inline bool heap_young(const struct heap *h)
{
    return h->pages_taken < HEAP_YOUNG_PAGES;
}
/* Ends h's young phase for good: every small class its own pages. */
HIDDEN void heap_mature(struct heap *h);
/* Whether h's kept lists may hold blocks: not while young, since
 * heap_keep matures a heap before it keeps anything. What reads the lists
 * asks first: they lie mostly on the heap's third OS page, which a heap
 * that never keeps leaves untouched, and on a kernel that backs a read of
 * untouched memory with a page of its own (this guest's) a read costs
 * that page (4 KiB a thread). */
static inline bool heap_may_keep(const struct heap *h)
{
    return !heap_young(h);
}
/* exact: the block must be of class cls itself, never a neighbour's lent
 * block (heap.c): an aligned request relies on its class's alignment. */
HIDDEN void *heap_alloc_slow(struct heap *h, unsigned cls, bool exact);
/* Allocates from a lock-protected shared heap (see heap.c). */
HIDDEN void *heap_alloc_shared(enum shared_heap_id id, unsigned cls, bool exact);
/* A full page of h's that got a block back returns to its class's queue.
 * Caller: h's own thread, outside its slow path. */
HIDDEN void heap_page_unfull(struct heap *h, struct page *pg);
/* Gives back the empty pages of h, another thread's heap, unless h's
 * thread is in its slow path (then nothing). Precondition: heap_lock
 * held, h active. */
HIDDEN void heap_trim_other(struct heap *h, uint64_t now);
HIDDEN bool heap_trim(void);

/* Between heap.c and heap_life.c. */
extern HIDDEN _Atomic uint64_t heap_trim_epoch;   /* bumped by malloc_trim */
/* Drains h's remote frees, then sweeps it with the given purge delay. */
HIDDEN void heap_tidy(struct heap *h, uint64_t now, uint64_t delay);
/* heap_tidy for the caller's own heap: its kept blocks and gathered
 * remote frees go home first. */
HIDDEN void heap_tidy_own(struct heap *h, uint64_t now, uint64_t delay);
/* How long a heap's thread must go without a sweep before other threads
 * give back its empty pages (heap_life.c). */
HIDDEN uint64_t heap_idle_ms(void);
/* The background thread's pass over every heap (heap_life.c). */
HIDDEN uint64_t heap_background_pass(uint64_t now, bool *gave);
/* Sweeps the pool of parked heaps, unless another thread is at it. */
HIDDEN void heap_tidy_abandoned(uint64_t now);
/* The bytes h keeps of other heaps' blocks (remote.h). */
HIDDEN size_t heap_kept_bytes(const struct heap *h);
HIDDEN void heap_thread_exit(void *arg);
HIDDEN void heap_fork_prepare(void);
HIDDEN void heap_fork_parent(void);
HIDDEN void heap_fork_child(void);

/* Whether pg is one of h's kept lists, not a page. The lists are told
 * apart by address, so a new heap need not write (and fault in) them. */
static inline bool heap_is_kept(const struct heap *h, const struct page *pg)
{
    return pg >= h->kept && pg < h->kept + NUM_SMALL_CLASSES;
}

/* Puts b on kept list k. Alone, for the class's current page: its heap
 * is then mature (heap_keep). */
static inline void heap_kept_push(struct page *k, struct block *b)
{
    block_set_next(b, k->free);
    k->free = b;
    k->touched++;
}

/* Blocks a kept list gathers before it takes over from a current page
 * that still has blocks on its list and nothing left to carve (see
 * struct heap's kept[]). Taking over at the first block, a list fed by a
 * sleeping owner's frees ran dry again within a few mallocs, and each
 * switch cost a slow path and two rewrites of the class's direct[]
 * slots: a one-worker larson copy took 197 instructions and 0.62
 * mispredicted branches (cachegrind's model) per replacement, 193 and
 * 0.52 with 8, 192 with 32. */
#define HEAP_KEPT_SWITCH 8

/* Kept blocks (remote.h): puts b, a small block of another heap, on h's
 * list for class cls. Callers: h's own thread. Inline: a thread adopting
 * an idle owner's blocks takes this on most of its frees. */
static inline void heap_keep(struct heap *h, struct block *b, unsigned cls)
{
    /* A kept list serves its own class's sizes only: pairs would hide it. */
    if (unlikely(heap_young(h)))
        heap_mature(h);
    struct page *k = &h->kept[cls];
    heap_kept_push(k, b);
    /* It waits only behind a page with nothing left to carve, whose list
     * running dry sends malloc to the slow path, which turns to it: behind
     * a page still carving, the fast path would carve past its blocks. */
    struct page *cur = h->current[cls];
    bool waits = cur->free && !page_can_carve(cur) && k->touched - k->used < HEAP_KEPT_SWITCH;
    if (cur != k && !waits)
        heap_set_current(h, cls, k);
}

/* Whether no other thread's frees wait for h: no transfer buffer in its
 * stack and no block on its chain (one test for both, they share a line). */
static inline bool heap_no_remote(struct heap *h)
{
    uintptr_t bufs = (uintptr_t)atomic_load_explicit(&h->remote_bufs, memory_order_relaxed);
    uintptr_t chain = (uintptr_t)atomic_load_explicit(&h->remote, memory_order_relaxed);
    return (bufs | chain) == 0;
}

/* Allocates from h's current page for cls (its pair's, while h is young
 * and the request not exact), else takes the slow path. */
static inline void *heap_alloc(struct heap *h, unsigned cls, bool exact)
{
    if (heap_young(h) && !exact)
        cls = sizeclass_coarse(cls);
    struct block *b = page_try_pop(h->current[cls]);
    return likely(b != NULL) ? b : heap_alloc_slow(h, cls, exact);
}

#endif
