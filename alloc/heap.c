/*
 * heap.c - per-thread heaps: the slow path that refills the fast path,
 * frees that cannot take the fast path, remote-free reclaim, purging of
 * empty pages after a delay, and handing heaps between threads.
 *
 * A page's life: fresh from a segment -> current page of its class (the
 * fast path pops from it) -> full (flagged, off every queue, so allocation
 * never scans it) -> back on its class queue when a block is freed ->
 * empty: retired (kept, reusable by any class of its kind) -> purged and
 * released to its segment once it stayed retired for purge_delay ms.
 * Emptiness is noticed by a periodic sweep, not by free(), so a
 * malloc/free ping-pong never leaves the fast path. The sweep also expires
 * the large-block cache, the one periodic duty outside the heaps.
 */
#include "heap.h"
#include "os.h"
#include "diag.h"
#include "init.h"
#include "large_cache.h"
#include "remote.h"

#include <pthread.h>
#include <string.h>

#define HEAP_CHUNK (64 * 1024)

HIDDEN struct page page_empty;
/* Filled in by heap_empty_init, not statically: 617 pointers in .data
 * would cost as many load-time relocations (16 KiB of .rela.dyn, mapped
 * into every process). malloc's fast path stays shut until then. */
HIDDEN struct heap heap_empty;
HIDDEN struct heap *heap_table[MAX_HEAPS + 1];
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
static struct heap *chunk_next;
static size_t chunk_left;
static pthread_key_t heap_key;
static _Atomic uint64_t trim_epoch;

/* ---- page bookkeeping ------------------------------------------------ */

static unsigned kind_of_class(unsigned cls) { return cls < NUM_SMALL_CLASSES ? 0 : 1; }

void heap_set_current(struct heap *h, unsigned cls, struct page *pg)
{
    h->current[cls] = pg;
    if (cls >= NUM_SMALL_CLASSES)
        return;
    unsigned lo = cls == 0 ? 0 : (sizeclass_block_size[cls - 1] >> 4) + 1;
    unsigned hi = sizeclass_block_size[cls] >> 4;
    for (unsigned i = lo; i <= hi; i++)
        h->direct[i] = pg;
}

/* Returns a block to its page; a full page goes back on its queue. */
static void heap_free_block(struct heap *h, struct page *pg, struct block *b)
{
    block_set_next(b, pg->free);
    pg->free = b;
    pg->used--;
    if (pg->flags & PAGE_FULL) {
        pg->flags &= (uint16_t)~PAGE_FULL;
        page_queue_push(&h->queue[pg->cls], pg);
    }
}

static void heap_retire_page(struct heap *h, struct page *pg, uint64_t now)
{
    page_queue_remove(&h->queue[pg->cls], pg);
    if (h->current[pg->cls] == pg)
        heap_set_current(h, pg->cls, &page_empty);
    pg->retired_at = now;
    page_queue_push(&h->retired[kind_of_class(pg->cls)], pg);
}

/* Hands a retired page's frames back to the OS and the page to its
 * segment; frees the segment when that was its last page. */
static void heap_purge_page(struct heap *h, struct page *pg)
{
    struct segment *s = segment_of(pg);
    /* touched, not reserved: a page reused for another class keeps what
     * earlier classes carved beyond this one's reach. */
    size_t touched = align_up(pg->touched, OS_PAGE);
    if (touched)
        os_purge(pg->start, touched);
    segment_release_page(s, pg);
    if (s->pages_in_use)
        return;
    if (s->prev)
        s->prev->next = s->next;
    else
        h->segments = s->next;
    if (s->next)
        s->next->prev = s->prev;
    segment_free(s);
}

/* Gives back the free memory inside a live page that lost blocks since
 * the last look. Small pages: at most half used and not the page being
 * allocated from (its free blocks are about to be reused); whole OS pages
 * of free blocks go back. Medium pages (a class usually has just one, its
 * current page): the inside of every free block, which costs the next user
 * of the block only the faults of the pages it really touches. */
static void heap_sweep_live_page(struct heap *h, struct page *pg)
{
    page_purge_tail(pg);
    if (pg->used >= pg->swept_used)
        return;
    if (pg->cls >= NUM_SMALL_CLASSES)
        page_purge_free_blocks(pg);
    else if (2 * pg->used <= pg->reserved && h->current[pg->cls] != pg)
        page_purge_free_runs(pg);
    else
        return;                 /* not sparse yet: look again when it is */
    pg->swept_used = pg->used;
}

/* Retires every empty page, gives back free memory inside live ones, then
 * purges pages retired for >= delay ms. */
static void heap_collect(struct heap *h, uint64_t now, uint64_t delay)
{
    /* Two speeds. Small pages: purging a sparse page's free OS pages or an
     * empty page costs a fault per OS page when they are used again, and a
     * churning program reuses them within tens of ms (10 ms cost rssfoot
     * 20% and frag 28% of their time against 100 ms). Medium pages: one
     * class holds a whole 4 MiB segment, so their free memory goes back
     * ten times sooner (at 100 ms mstress peaked 11% higher). */
    uint64_t medium_delay = delay / 10;
    bool small_due = delay == 0 || now >= h->next_small_sweep_ms;
    /* A page found empty now emptied at some point since the last sweep:
     * date it from there, so a heap that sat idle for longer than the
     * delay gives its empty pages back at its first sweep. */
    uint64_t since = h->last_sweep_ms ? h->last_sweep_ms : now;
    h->last_sweep_ms = now;
    if (small_due)
        h->next_small_sweep_ms = now + delay / 2;
    for (unsigned cls = small_due ? 0 : NUM_SMALL_CLASSES; cls < NUM_CLASSES; cls++) {
        struct page *pg = h->queue[cls].first, *next;
        for (; pg; pg = next) {
            next = pg->next;
            if (pg->used == 0)
                heap_retire_page(h, pg, since);
            else
                heap_sweep_live_page(h, pg);
        }
    }
    for (unsigned k = 0; k < 2; k++) {
        struct page *pg;
        uint64_t keep = k == 0 ? delay : medium_delay;
        while ((pg = h->retired[k].first) && now - pg->retired_at >= keep) {
            page_queue_remove(&h->retired[k], pg);
            heap_purge_page(h, pg);
        }
    }
}

/* Takes every block other threads freed into h and frees it locally:
 * whole transfer buffers (independent loads), then the rare chain of
 * blocks pushed one by one when no buffer could be had. */
static void heap_drain_remote(struct heap *h)
{
    if (atomic_load_explicit(&h->remote_bufs, memory_order_relaxed)) {
        struct remote_buf *list = atomic_exchange_explicit(&h->remote_bufs, NULL,
                                                           memory_order_acquire);
        for (struct remote_buf *rb = list; rb; rb = rb->next) {
            for (uint32_t i = 0; i < rb->count; i++) {
                struct block *b = rb->blocks[i];
                heap_free_block(h, segment_page_of(segment_of(b), b), b);
            }
        }
        remote_recycle(list);
    }
    if (atomic_load_explicit(&h->remote, memory_order_relaxed) == NULL)
        return;
    struct block *b = atomic_exchange_explicit(&h->remote, NULL, memory_order_acquire);
    while (b) {
        struct block *next = block_next(b);
        heap_free_block(h, segment_page_of(segment_of(b), b), b);
        b = next;
    }
}

/* Takes back h's remote frees, then sweeps it: what every path that puts
 * a heap in order outside its own slow path does (exit, trim, pool sweep). */
static void heap_tidy(struct heap *h, uint64_t now, uint64_t delay)
{
    heap_drain_remote(h);
    heap_collect(h, now, delay);
}

static void heap_tidy_abandoned(uint64_t now);

/* ---- kept blocks (remote.h) ------------------------------------------- */

void heap_keep(struct heap *h, struct block *b, unsigned cls)
{
    struct page *k = &h->kept[cls];
    if (!k->free && h->current[cls] != k)
        heap_set_current(h, cls, k);
    block_set_next(b, k->free);
    k->free = b;
    k->touched++;
}

size_t heap_kept_bytes(const struct heap *h)
{
    size_t bytes = 0;
    for (unsigned cls = 0; cls < NUM_SMALL_CLASSES; cls++)
        bytes += (size_t)(h->kept[cls].touched - h->kept[cls].used) * h->kept[cls].block_size;
    return bytes;
}

/* Sends kept blocks home: every list, or only those nobody took from since
 * the last sweep. */
static void heap_release_kept(struct heap *h, bool idle_only)
{
    for (unsigned cls = 0; cls < NUM_SMALL_CLASSES; cls++) {
        struct page *k = &h->kept[cls];
        bool idle = k->used == h->kept_seen[cls];
        h->kept_seen[cls] = k->used;
        if (!k->free || (idle_only && !idle))
            continue;
        if (h->current[cls] == k)
            heap_set_current(h, cls, &page_empty);
        struct block *list = k->free;
        k->free = NULL;
        k->touched = k->used;
        remote_send_home(list);
    }
}

/* The periodic sweep, run from the allocation slow path. */
static void heap_maybe_collect(struct heap *h)
{
    uint64_t now = os_now_ms();
    uint64_t epoch = atomic_load_explicit(&trim_epoch, memory_order_relaxed);
    if (now < h->next_collect_ms && h->trim_epoch == epoch)
        return;
    uint64_t delay = h->trim_epoch == epoch ? init_purge_delay_ms() : 0;
    h->trim_epoch = epoch;
    heap_release_kept(h, delay != 0);
    remote_flush();
    heap_collect(h, now, delay);
    h->next_collect_ms = now + (delay / 20 ? delay / 20 : 1);   /* medium_delay / 2 */
    heap_tidy_abandoned(now);
    large_cache_expire(false);
}

/* A page for cls: a retired one (same class first), a free page of one of
 * h's small segments, or a page of a new segment. */
static struct page *heap_new_page(struct heap *h, unsigned cls)
{
    unsigned k = kind_of_class(cls);
    struct page_queue *rq = &h->retired[k];
    struct page *pg = rq->last;
    for (int i = 0; pg && i < 8; i++, pg = pg->prev) {
        if (pg->cls == cls) {
            page_queue_remove(rq, pg);
            return pg;
        }
    }
    if ((pg = rq->last)) {
        page_queue_remove(rq, pg);
        page_init(segment_of(pg), pg, cls);
        return pg;
    }
    for (struct segment *s = h->segments; k == 0 && s; s = s->next) {
        if (s->kind == SEG_SMALL && (pg = segment_take_page(s))) {
            page_init(s, pg, cls);
            return pg;
        }
    }
    struct segment *s = segment_alloc(h, h->tag, k == 0 ? SEG_SMALL : SEG_MEDIUM);
    if (!s)
        return NULL;
    s->prev = NULL;
    s->next = h->segments;
    if (h->segments)
        h->segments->prev = s;
    h->segments = s;
    pg = segment_take_page(s);
    page_init(s, pg, cls);
    return pg;
}

void *heap_alloc_slow(struct heap *h, unsigned cls)
{
    heap_maybe_collect(h);
    heap_drain_remote(h);
    struct page *pg = h->current[cls];
    if (pg->flags & PAGE_KEPT) {
        pg = &page_empty;               /* ran dry: back to the own pages */
    } else if (cls < NUM_SMALL_CLASSES && h->kept[cls].free) {
        heap_set_current(h, cls, &h->kept[cls]);
        return heap_alloc(h, cls);
    }
    if (pg != &page_empty) {
        if (page_has_room(pg))
            return page_pop(pg);
        pg->flags |= PAGE_FULL;
        page_queue_remove(&h->queue[cls], pg);
    }
    while ((pg = h->queue[cls].first)) {
        if (page_has_room(pg)) {
            heap_set_current(h, cls, pg);
            return page_pop(pg);
        }
        pg->flags |= PAGE_FULL;
        page_queue_remove(&h->queue[cls], pg);
    }
    pg = heap_new_page(h, cls);
    if (!pg) {
        heap_set_current(h, cls, &page_empty);
        return NULL;
    }
    page_queue_push(&h->queue[cls], pg);
    heap_set_current(h, cls, pg);
    return page_pop(pg);
}

/* free() of a block of the caller's own heap that the fast path refused:
 * its page is full, or the block is the head of its free list. */
void heap_free_owned_slow(struct heap *h, struct page *pg, struct block *b)
{
    if (b == pg->free)
        diag_fail("free", "double free", b);
    heap_free_block(h, pg, b);
}

/* ---- heap life cycle ------------------------------------------------- */

/* Precondition: heap_lock held. */
static struct heap *heap_new(uint8_t state)
{
    if (heap_count >= MAX_HEAPS)
        return NULL;
    if (chunk_left < sizeof(struct heap)) {
        chunk_next = os_map(HEAP_CHUNK);
        if (!chunk_next)
            return NULL;
        chunk_left = HEAP_CHUNK;
    }
    struct heap *h = chunk_next++;
    chunk_left -= sizeof(struct heap);
    for (unsigned i = 0; i < NUM_CLASSES; i++)
        heap_set_current(h, i, &page_empty);
    for (unsigned i = 0; i < NUM_SMALL_CLASSES; i++) {
        h->kept[i].flags = PAGE_KEPT;
        h->kept[i].cls = (uint8_t)i;
        h->kept[i].block_size = sizeclass_block_size[i];
    }
    h->tag = (uint16_t)++heap_count;
    h->state = state;
    heap_table[h->tag] = h;
    return h;
}

static struct heap *heap_acquire(void)
{
    pthread_mutex_lock(&heap_lock);
    struct heap *h = heap_pool;
    if (h)
        __atomic_store_n(&heap_pool, h->pool_next, __ATOMIC_RELAXED);
    else
        h = heap_new(HEAP_ACTIVE);
    if (h)
        h->state = HEAP_ACTIVE;
    pthread_mutex_unlock(&heap_lock);
    if (!h)
        return NULL;
    tls_heap = h;
    tls_tag = h->tag;
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

void *heap_alloc_shared(enum shared_heap_id id, unsigned cls)
{
    struct shared_heap *sh = &shared[id];
    pthread_mutex_lock(&sh->lock);
    if (!sh->heap) {
        init_ensure();
        pthread_mutex_lock(&heap_lock);
        __atomic_store_n(&sh->heap, heap_new(HEAP_SHARED), __ATOMIC_RELEASE);
        if (id == SHARED_DEBUG && sh->heap)
            __atomic_store_n(&heap_debug_tag, sh->heap->tag, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&heap_lock);
    }
    void *p = sh->heap ? heap_alloc(sh->heap, cls) : NULL;
    pthread_mutex_unlock(&sh->lock);
    return p;
}

/* Parks h for the next new thread. Its empty pages are retired, not purged:
 * threads that come and go in quick succession hand the same warm pages to
 * each other, and the pool sweep purges them once purge_delay has passed. */
static void heap_abandon(struct heap *h)
{
    heap_release_kept(h, false);
    remote_flush();
    heap_tidy(h, os_now_ms(), init_purge_delay_ms());
    pthread_mutex_lock(&heap_lock);
    h->state = HEAP_ABANDONED;
    h->pool_next = heap_pool;
    __atomic_store_n(&heap_pool, h, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&heap_lock);
}

/* Precondition: heap_lock held. */
static void heap_tidy_pool(uint64_t now, uint64_t delay)
{
    for (struct heap *p = heap_pool; p; p = p->pool_next)
        heap_tidy(p, now, delay);
}

/* Parked heaps still receive remote frees; sweep them now and then. */
static void heap_tidy_abandoned(uint64_t now)
{
    if (!__atomic_load_n(&heap_pool, __ATOMIC_RELAXED) || pthread_mutex_trylock(&heap_lock) != 0)
        return;
    heap_tidy_pool(now, init_purge_delay_ms());
    pthread_mutex_unlock(&heap_lock);
}

void heap_thread_exit(void *arg)
{
    remote_flush();
    tls_heap = &heap_empty;
    tls_tag = TAG_EMPTY;
    tls_exited = true;
    heap_abandon(arg);
    remote_thread_exit();       /* the drain above may have kept buffers */
}

void heap_empty_init(void)
{
    for (unsigned i = 0; i < DIRECT_SLOTS; i++)
        heap_empty.direct[i] = &page_empty;
    for (unsigned i = 0; i < NUM_CLASSES; i++)
        heap_empty.current[i] = &page_empty;
    heap_empty.tag = TAG_EMPTY;
}

void heap_process_init(void)
{
    pthread_key_create(&heap_key, heap_thread_exit);
    remote_process_init();
}

bool heap_trim(void)
{
    struct os_counters before, after;
    os_counters_read(&before);
    atomic_fetch_add(&trim_epoch, 1);
    remote_flush();
    struct heap *h = tls_heap;
    uint64_t now = os_now_ms();
    if (h != &heap_empty) {
        h->trim_epoch = atomic_load(&trim_epoch);
        heap_release_kept(h, false);
        remote_flush();
        heap_tidy(h, now, 0);
    }
    pthread_mutex_lock(&heap_lock);
    heap_tidy_pool(now, 0);
    pthread_mutex_unlock(&heap_lock);
    for (int i = 0; i < SHARED_COUNT; i++) {
        pthread_mutex_lock(&shared[i].lock);
        if (shared[i].heap)
            heap_tidy(shared[i].heap, now, 0);
        pthread_mutex_unlock(&shared[i].lock);
    }
    segment_cache_release();
    large_cache_expire(true);
    os_counters_read(&after);
    return after.purged_bytes != before.purged_bytes ||
           after.calls[OS_MUNMAP] != before.calls[OS_MUNMAP];
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
