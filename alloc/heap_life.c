/*
 * heap_life.c - where heaps come from and where they go: creation, the
 * heap a thread takes on its first allocation, the pool of heaps left by
 * exited threads (and its sweep), the shared orphan and debug heaps,
 * malloc_trim, and fork.
 *
 * Heap structs are carved from 64 KiB mappings and never unmapped: other
 * threads may push remote frees onto any heap at any time.
 */
#include "heap.h"
#include "os.h"
#include "init.h"
#include "large.h"
#include "large_cache.h"
#include "span.h"
#include "remote.h"
#include "lock.h"

#include <pthread.h>
#include <stddef.h>

#define HEAP_CHUNK (64 * 1024)
/* Each heap starts on an OS page, so that what every heap writes (direct[]
 * to the remote line, 7.6 KiB) lies on two pages and the kept lists, which
 * only a heap that adopts other heaps' blocks writes, mostly on the third
 * (heap.h). Packed at 11 KiB apiece, with the kept lists in the middle, a
 * heap held three pages: 256 threads that each took 48 blocks of six sizes
 * and waited cost 47.6 KiB a thread, 44.4 now (glibc 18, tcmalloc 22,
 * jemalloc 58, mimalloc 109). Five heaps to a chunk either way. */
#define HEAP_STRIDE ((sizeof(struct heap) + OS_PAGE - 1) & ~(size_t)(OS_PAGE - 1))
_Static_assert(HEAP_CHUNK / HEAP_STRIDE >= 5, "heaps per chunk");
_Static_assert(offsetof(struct heap, kept) <= 2 * OS_PAGE,
               "what every heap writes fits its first two pages");

HIDDEN TABLE_BSS struct heap *heap_table[MAX_HEAPS + 1];
HIDDEN uint16_t heap_debug_tag = TAG_EMPTY;
HIDDEN __thread struct heap *tls_heap TLS_IE = &heap_empty;
HIDDEN __thread uint16_t tls_tag TLS_IE = TAG_EMPTY;
static __thread bool tls_exited TLS_IE;

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;   /* pool, table */
static struct heap *heap_pool;          /* abandoned heaps, ready for reuse */

/* Heaps owned by whoever holds their lock: one for threads past their exit
 * (or beyond MAX_HEAPS), one for debug-mode blocks. No thread's tls_tag
 * ever equals theirs, so every free of their blocks takes the slow path. */
static struct shared_heap {
    pthread_mutex_t lock;
    struct heap *heap;
} shared[SHARED_COUNT] = {
    { PTHREAD_MUTEX_INITIALIZER, NULL },
    { PTHREAD_MUTEX_INITIALIZER, NULL },
};
static unsigned heap_count;
static char *chunk_next;
static size_t chunk_left;
static pthread_key_t heap_key;
HIDDEN _Atomic uint64_t heap_trim_epoch;

/* ---- heap life cycle ------------------------------------------------- */

/* Every class's current page, and every direct[] slot, is page_empty
 * (what heap_set_current would leave, written straight). */
static void heap_clear_current(struct heap *h)
{
    for (unsigned i = 0; i < DIRECT_SLOTS; i++)
        h->direct[i] = &page_empty;
    for (unsigned i = 0; i < NUM_CLASSES; i++)
        h->current[i] = &page_empty;
}

/* Precondition: heap_lock held. */
static struct heap *heap_new(uint8_t state)
{
    if (heap_count >= MAX_HEAPS)
        return NULL;
    if (chunk_left < HEAP_STRIDE) {
        chunk_next = os_map(HEAP_CHUNK);
        if (!chunk_next)
            return NULL;
        chunk_left = HEAP_CHUNK;
    }
    struct heap *h = (struct heap *)chunk_next;
    chunk_next += HEAP_STRIDE;
    chunk_left -= HEAP_STRIDE;
    heap_clear_current(h);
    unsigned tag = heap_count + 1;
    h->tag = (uint16_t)tag;
    h->state = state;
    /* The entry before the count: heap_give_back_keeps reads both without
     * the lock. */
    __atomic_store_n(&heap_table[tag], h, __ATOMIC_RELEASE);
    __atomic_store_n(&heap_count, tag, __ATOMIC_RELEASE);
    return h;
}

static struct heap *heap_acquire(void)
{
    lock_take(&heap_lock);
    struct heap *h = heap_pool;
    if (h)
        __atomic_store_n(&heap_pool, h->pool_next, __ATOMIC_RELAXED);
    else
        h = heap_new(HEAP_ACTIVE);
    if (h)
        h->state = HEAP_ACTIVE;
    lock_give(&heap_lock);
    if (!h)
        return NULL;
    tls_heap = h;
    tls_tag = h->tag;
    span_keep_bind(&h->keep);
    span_arena_bind(h->tag);
    /* May allocate for high key numbers; tls_heap is already usable. */
    pthread_setspecific(heap_key, h);
    return h;
}

struct heap *heap_get(void)
{
    struct heap *h = tls_heap;
    if (likely(h != &heap_empty))
        return h;
    init_ensure();
    if (tls_exited)
        return NULL;
    return heap_acquire();
}

void *heap_alloc_shared(enum shared_heap_id id, unsigned cls, bool exact)
{
    struct shared_heap *sh = &shared[id];
    lock_take(&sh->lock);
    if (!sh->heap) {
        init_ensure();
        lock_take(&heap_lock);
        __atomic_store_n(&sh->heap, heap_new(HEAP_SHARED), __ATOMIC_RELEASE);
        if (id == SHARED_DEBUG && sh->heap)
            __atomic_store_n(&heap_debug_tag, sh->heap->tag, __ATOMIC_RELEASE);
        lock_give(&heap_lock);
    }
    void *p = sh->heap ? heap_alloc(sh->heap, cls, exact) : NULL;
    lock_give(&sh->lock);
    return p;
}

/* Parks h for the next new thread. Its empty pages are retired, not purged:
 * threads that come and go in quick succession hand the same warm pages to
 * each other, and the pool sweep purges them once purge_delay has passed. */
static void heap_abandon(struct heap *h)
{
    span_keep_sweep(&h->keep, true);
    heap_tidy_own(h, os_now_ms(), init_purge_delay_ms());
    lock_take(&heap_lock);
    h->state = HEAP_ABANDONED;
    h->pool_next = heap_pool;
    __atomic_store_n(&heap_pool, h, __ATOMIC_RELAXED);
    lock_give(&heap_lock);
}

/* Precondition: heap_lock held. */
static void heap_tidy_pool(uint64_t now, uint64_t delay)
{
    for (struct heap *p = heap_pool; p; p = p->pool_next)
        heap_tidy(p, now, delay);
}

/* Idle heaps. A thread that stopped allocating never sweeps its heap
 * again (a thread pool's worker waiting for work after a peak), so other
 * threads give back its empty pages (heap_trim_other) once it has not
 * swept for ten purge delays, and at least a second; they look every
 * IDLE_SCAN_MS. A worker that freed 200 MB and waited kept them all, as
 * under glibc until malloc_trim. */
#define IDLE_SCAN_MS 100
#define IDLE_MIN_MS  1000
static uint64_t next_idle_scan_ms;      /* atomic */

uint64_t heap_idle_ms(void)
{
    uint64_t delay = init_purge_delay_ms();
    return 10 * delay > IDLE_MIN_MS ? 10 * delay : IDLE_MIN_MS;
}

/* Trims the other threads' heaps that have not swept for `idle` ms
 * (every one when idle is 0, as malloc_trim asks). Under heap_lock, so no
 * fork runs meanwhile and no heap changes hands. */
static void heap_trim_others(uint64_t now, uint64_t idle)
{
    for (unsigned t = 1; t <= heap_count; t++) {
        struct heap *o = heap_table[t];
        uint64_t last = __atomic_load_n(&o->last_sweep_ms, __ATOMIC_RELAXED);
        /* last > now: it swept after our clock read; not idle. */
        if (o != tls_heap && o->state == HEAP_ACTIVE &&
            (idle == 0 || (last && last <= now && now - last >= idle)))
            heap_trim_other(o, now);
    }
}

/* The span runs the other threads' heaps kept: all of them (`all`), or
 * those no request took since the last look (span_keep_sweep's two
 * looks, IDLE_SCAN_MS apart here): a thread whose requests are all large
 * never sweeps its heap, and would keep its runs for as long as it lives.
 * Not under heap_lock: fork takes the span lock before it, and span_give
 * takes the span lock. The table only grows and a keep's slots are
 * atomic, so no lock is needed to read them; a heap that changes hands
 * meanwhile loses at most runs it would have reused. */
static void heap_give_back_keeps(bool all)
{
    unsigned count = __atomic_load_n(&heap_count, __ATOMIC_ACQUIRE);
    for (unsigned t = 1; t <= count; t++) {
        struct heap *o = __atomic_load_n(&heap_table[t], __ATOMIC_ACQUIRE);
        if (o && o != tls_heap)
            span_keep_sweep(&o->keep, all);
    }
}

/* Parked heaps still receive remote frees; sweep them now and then, and
 * idle ones (above). */
void heap_tidy_abandoned(uint64_t now)
{
    bool pool = __atomic_load_n(&heap_pool, __ATOMIC_RELAXED) != NULL;
    bool scan = now >= __atomic_load_n(&next_idle_scan_ms, __ATOMIC_RELAXED);
    if ((!pool && !scan) || !lock_try(&heap_lock))
        return;
    uint64_t delay = init_purge_delay_ms();
    if (pool)
        heap_tidy_pool(now, delay);
    if (scan) {
        __atomic_store_n(&next_idle_scan_ms, now + IDLE_SCAN_MS, __ATOMIC_RELAXED);
        heap_trim_others(now, heap_idle_ms());
    }
    lock_give(&heap_lock);
    if (scan)
        heap_give_back_keeps(false);
}

/* Newest sweep time of an active heap. Precondition: heap_lock held. */
static uint64_t heap_newest_sweep(void)
{
    uint64_t newest = 0;
    for (unsigned t = 1; t <= heap_count; t++) {
        struct heap *o = heap_table[t];
        uint64_t last = __atomic_load_n(&o->last_sweep_ms, __ATOMIC_RELAXED);
        if (o->state == HEAP_ACTIVE && last > newest)
            newest = last;
    }
    return newest;
}

/* What a trim and a background pass do beyond the caller's own heap:
 * parked heaps with `delay`, the other threads' heaps idle for `idle` ms
 * (0: every one), then the shared heaps, waiting for their locks or
 * (`wait` false) skipping those held. Returns heap_newest_sweep(). */
static uint64_t heap_tidy_process(uint64_t now, uint64_t delay, uint64_t idle, bool wait)
{
    lock_take(&heap_lock);
    heap_tidy_pool(now, delay);
    uint64_t newest = heap_newest_sweep();
    heap_trim_others(now, idle);
    lock_give(&heap_lock);
    heap_give_back_keeps(idle == 0);
    for (int i = 0; i < SHARED_COUNT; i++) {
        if (wait)
            lock_take(&shared[i].lock);
        else if (!lock_try(&shared[i].lock))
            continue;
        if (shared[i].heap)
            heap_tidy(shared[i].heap, now, delay);
        lock_give(&shared[i].lock);
    }
    return newest;
}

/* Whether memory went back to the OS since `before` was read. */
static bool gave_back_since(const struct os_counters *before)
{
    struct os_counters after;
    os_counters_read(&after);
    return after.purged_bytes != before->purged_bytes ||
           after.calls[OS_MUNMAP] != before->calls[OS_MUNMAP];
}

/* The background thread's pass (background.c): what the allocating
 * threads' sweeps do for the process, for when none of them runs any more.
 * Parked heaps with the purge delay, the empty pages of heaps idle past
 * the threshold above, the shared heaps, and the large cache. Returns the
 * time of the newest sweep of an active heap (background.c backs off while
 * it stays the same); *gave says whether this pass gave memory back. */
uint64_t heap_background_pass(uint64_t now, bool *gave)
{
    struct os_counters before;
    os_counters_read(&before);
    uint64_t newest = heap_tidy_process(now, init_purge_delay_ms(), heap_idle_ms(), false);
    large_expire(false);
    *gave = gave_back_since(&before);
    return newest;
}

void heap_thread_exit(void *arg)
{
    tls_heap = &heap_empty;
    tls_tag = TAG_EMPTY;
    tls_exited = true;
    span_keep_bind(NULL);
    heap_abandon(arg);
    remote_thread_exit();       /* the drain above may have kept buffers */
}

void heap_empty_init(void)
{
    heap_clear_current(&heap_empty);
    heap_empty.tag = TAG_EMPTY;
}

void heap_process_init(void)
{
    pthread_key_create(&heap_key, heap_thread_exit);
    remote_process_init();
}

bool heap_trim(void)
{
    struct os_counters before;
    os_counters_read(&before);
    atomic_fetch_add(&heap_trim_epoch, 1);
    struct heap *h = tls_heap;
    uint64_t now = os_now_ms();
    if (h != &heap_empty) {
        h->trim_epoch = atomic_load(&heap_trim_epoch);
        span_keep_sweep(&h->keep, true);
        heap_tidy_own(h, now, 0);
    } else {
        remote_flush();         /* a thread that only frees */
    }
    /* Other threads' heaps: their empty pages, unless the thread is in its
     * slow path right now (it sweeps itself soon then, and the epoch
     * above makes that sweep purge). */
    heap_tidy_process(now, 0, 0, true);
    span_expire(true);          /* before the release: its segments join the cache */
    segment_cache_release();
    large_cache_expire(true);
    return gave_back_since(&before);
}

/* ---- fork --------------------------------------------------------------- */

void heap_fork_prepare(void)
{
    for (int i = 0; i < SHARED_COUNT; i++)
        pthread_mutex_lock(&shared[i].lock);
    pthread_mutex_lock(&heap_lock);
    remote_fork_prepare();
    segment_lock_all();
}

void heap_fork_parent(void)
{
    segment_unlock_all();
    remote_fork_parent();
    pthread_mutex_unlock(&heap_lock);
    for (int i = SHARED_COUNT - 1; i >= 0; i--)
        pthread_mutex_unlock(&shared[i].lock);
}

/* The child has one thread. Other threads' heaps may have been mid-update
 * when fork() ran, so they are never reused: they become zombies whose
 * memory the child simply keeps. */
void heap_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    heap_lock = fresh;
    for (int i = 0; i < SHARED_COUNT; i++)
        shared[i].lock = fresh;
    segment_reset_locks();
    remote_fork_child();
    for (unsigned t = 1; t <= heap_count; t++) {
        struct heap *h = heap_table[t];
        if (h->state == HEAP_ACTIVE && h != tls_heap)
            h->state = HEAP_ZOMBIE;
    }
}
