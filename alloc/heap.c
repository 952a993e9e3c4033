/*
 * heap.c - a heap at work: the slow path that refills the fast path, frees
 * that cannot take the fast path, the drain of remote frees, kept blocks,
 * and the sweep that retires and purges pages. (Creating heaps and handing
 * them between threads: heap_life.c.)
 *
 * A page's life: fresh from a segment -> current page of its class (the
 * fast path pops from it) -> full (flagged, off every queue, so allocation
 * never scans it) -> back on its class queue when a block is freed ->
 * empty: retired (kept, reusable by any class of its kind, and once all
 * of its segment's pages are, the segment by the other kind) -> purged
 * and released to its segment once it stayed retired for purge_delay ms.
 * Emptiness is noticed by a periodic sweep, not by free(), so a
 * malloc/free ping-pong never leaves the fast path. The sweep also expires
 * the large-block cache, the one periodic duty outside the heaps.
 */
#include "heap.h"
#include "os.h"
#include "diag.h"
#include "init.h"
#include "large.h"
#include "remote.h"
#include "span.h"
#include "background.h"
#include "../instrument/hooks.h"

#include <sched.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

HIDDEN struct page page_empty;
/* Filled in by heap_empty_init, not statically: 617 pointers in .data
 * would cost as many load-time relocations (16 KiB of .rela.dyn, mapped
 * into every process). malloc's fast path stays shut until then. */
HIDDEN struct heap heap_empty;

/* ---- page bookkeeping ------------------------------------------------ */

static unsigned kind_of_class(unsigned cls) { return cls < NUM_SMALL_CLASSES ? 0 : 1; }

/* A medium class above SPAN_MIN serves requests only while their span
 * gate is shut (span.h): blocks that were freed mostly unwritten. Such a
 * class gives back what another class wrote in a retired page it takes
 * over (heap_take_written): under its blocks that memory would stay
 * resident for nothing, where a purged page faults in only what they
 * write. With 1 MiB medium pages, taken over from class to class more
 * often than whole segments were, mstress (objects written at their ends
 * only) peaked at 13,300 KiB at one thread and 18,300 at two, against
 * 11,630 and 17,180 with pages of a whole segment (/usr/bin/time, medians
 * of 5 runs). Passing retired pages by for fresh ones took it to 11,732
 * and 16,684 (the suite's measure, 11 runs); taking them over and giving
 * back what they held, to 11,296 and 15,860: passed by, they stayed
 * retired, and written, until the sweep. An emptied small segment it
 * still passes by (heap_fresh_page). */
static bool class_writes_sparsely(unsigned cls)
{
    return sizeclass_block_size[cls] > SPAN_MIN;
}

/* pg, a retired page another class wrote (`touched` says how far), set
 * up for cls; a class that writes sparsely gives that back first, before
 * page_init, which then sees a page that nothing wrote. The purge lands
 * at once: the page is handed out next. */
static void heap_take_written(struct segment *s, struct page *pg, unsigned cls)
{
    if (class_writes_sparsely(cls) && pg->touched) {
        os_purge((uint8_t *)s + segment_area_start((enum segment_kind)s->kind, pg->index),
                 align_up(pg->touched, OS_PAGE));
        os_purge_flush();
        pg->touched = 0;
    }
    page_init(s, pg, cls);
}

/* Medium pages go back this many times sooner than small ones (see
 * heap_collect). The periodic sweep runs SWEEP_DIVISOR times per delay. */
#define MEDIUM_DELAY_DIVISOR 4
#define SWEEP_DIVISOR        20

void heap_set_current(struct heap *h, unsigned cls, struct page *pg)
{
    /* A page hands out blocks only while it is current (and when it lends,
     * heap_borrow): blocks handed out from here on and freed before the
     * next sweep leave `used` where the last partial purge saw it, and
     * heap_sweep_live_page would never look again. */
    if (pg != &page_empty && !heap_is_kept(h, pg))
        pg->swept_used = UINT32_MAX;
    h->current[cls] = pg;
    if (cls >= NUM_SMALL_CLASSES)
        return;
    if (pg != &page_empty)
        h->borrowed[cls] = 0;
    /* A young heap's upper class of a pair takes its lower class's sizes. */
    unsigned first = heap_young(h) && sizeclass_coarse(cls - 1) == cls ? cls - 1 : cls;
    unsigned lo = first == 0 ? 0 : (sizeclass_block_size[first - 1] >> 4) + 1;
    unsigned hi = sizeclass_block_size[cls] >> 4;
    /* Two slots a step (a 4 KiB class has 16): the slow path of a class
     * whose pages are nearly full comes here every few dozen blocks, and
     * one slot a step was an eighth of its instructions (rssfoot). */
    struct page **d = &h->direct[lo], **end = &h->direct[hi + 1];
    if ((hi - lo) % 2 == 0)
        *d++ = pg;
    for (; d < end; d += 2)
        d[0] = d[1] = pg;
}

/* ---- the trim lock --------------------------------------------------- */

/* A heap's queues, retired lists and segments are its thread's, changed
 * only in its slow paths. Another thread's malloc_trim may still give back
 * the empty pages of a heap whose thread stopped allocating (a thread
 * pool's idle worker kept its peak for as long as it lived): both hold the
 * heap's trim lock for that. The owner takes it around each slow path and
 * waits the rare times a trim holds it; the trimmer only tries it. The
 * trimmer touches no current page and no page with a block in use: the
 * fast paths pop only from current pages, and push only onto the page of
 * a block in use. */
static void heap_lock_own(struct heap *h)
{
    while (__atomic_exchange_n(&h->trim_lock, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

/* For another thread: false when h's thread is in its slow path. */
static bool heap_trylock(struct heap *h)
{
    return !__atomic_exchange_n(&h->trim_lock, 1, __ATOMIC_ACQUIRE);
}

static void heap_unlock_own(struct heap *h)
{
    __atomic_store_n(&h->trim_lock, 0, __ATOMIC_RELEASE);
}

static void page_unfull(struct heap *h, struct page *pg)
{
    pg->flags &= (uint16_t)~PAGE_FULL;
    page_queue_push(&h->queue[pg->cls], pg);
}

void heap_page_unfull(struct heap *h, struct page *pg)
{
    heap_lock_own(h);
    page_unfull(h, pg);
    heap_unlock_own(h);
}

/* Returns a block to its page; a full page goes back on its queue. */
static void heap_free_block(struct heap *h, struct page *pg, struct block *b)
{
    if (pg->flags & PAGE_MEDIUM)
        page_medium_freed(pg, b);
    block_set_next(b, pg->free);
    pg->free = b;
    pg->used--;
    if (pg->flags & PAGE_FULL)
        page_unfull(h, pg);
}

/* Takes pg, an empty page, out of its class's queue. */
static void heap_unqueue_empty(struct heap *h, struct page *pg)
{
    page_queue_remove(&h->queue[pg->cls], pg);
    if (h->current[pg->cls] == pg)
        heap_set_current(h, pg->cls, &page_empty);
}

/* Puts pg, an empty page out of any queue, on its kind's retired list as
 * retired at `at`: at the newest end, or at the oldest (`oldest`). */
static void heap_retired_push(struct heap *h, struct page *pg, uint64_t at, bool oldest)
{
    struct page_queue *q = &h->retired[kind_of_class(pg->cls)];
    pg->retired_at = at;
    pg->flags |= PAGE_RETIRED;
    if (oldest)
        page_queue_push_front(q, pg);
    else
        page_queue_push(q, pg);
    segment_of(pg)->pages_retired++;
}

static void heap_retire_page(struct heap *h, struct page *pg, uint64_t now)
{
    heap_unqueue_empty(h, pg);
    heap_retired_push(h, pg, now, false);
    h->retired_of[pg->cls] = pg;
}

/* Takes pg off its retired list. */
static void heap_unretire(struct heap *h, struct page *pg)
{
    page_queue_remove(&h->retired[kind_of_class(pg->cls)], pg);
    pg->flags &= (uint16_t)~PAGE_RETIRED;
    if (h->retired_of[pg->cls] == pg)
        h->retired_of[pg->cls] = NULL;
    segment_of(pg)->pages_retired--;
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
        os_purge(page_start(pg), touched);
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
 * current page): the inside of every block that stayed free since the
 * last look, which costs the next user of the block only the faults of
 * the pages it really touches. */
static void heap_sweep_live_page(struct heap *h, struct page *pg, bool at_once, uint64_t now,
                                 uint64_t medium_delay)
{
    bool medium = pg->cls >= NUM_SMALL_CLASSES;
    /* What an earlier class or kind wrote beyond this class's reach goes
     * back (page_purge_tail), but not from a medium page that carved since
     * the last look: its next blocks are in it. A segment that a program
     * in phases (w_phase) emptied of small blocks became a medium page
     * (then the whole segment) whose 4 MiB were trimmed at the next
     * sweep, a few ms later, and faulted in again block by block:
     * 8,000-27,000 faults a round (0
     * with purge_delay=400), 0-2,300 this way. (8 bits of the count tell
     * it from a page standing still; a wrap of exactly 256 blocks only
     * trims early.) */
    if (!medium || at_once || pg->carved_seen == (uint8_t)pg->reserved)
        page_purge_tail(pg);
    if (medium)
        pg->carved_seen = (uint8_t)pg->reserved;
    if (pg->used >= pg->swept_used)
        return;
    if (medium) {
        /* A block goes back once it stayed free from one look to the
         * next, the looks medium_delay apart. Purged at the next sweep
         * (a twentieth of the delay), a block reused within tens of ms
         * faulted its pages in again: mstress at its full size took
         * 43-46k faults a run that way, 6-14k this way (5k with no such
         * purges at all, at 20% more peak RSS). Until then swept_used
         * stays where it was, and the sweep comes back. */
        if (!at_once && (uint32_t)now - pg->looked_at < medium_delay)
            return;
        pg->looked_at = (uint32_t)now;
        if (page_purge_free_blocks(pg, at_once))
            return;
    } else if (2 * pg->used <= pg->reserved && h->current[pg->cls] != pg) {
        if (!pg->sparse_seen && !at_once) {
            pg->sparse_seen = 1;
            return;             /* sparse for the first time: look again next sweep */
        }
        page_purge_free_runs(pg);
        pg->sparse_seen = 0;
    } else {
        pg->sparse_seen = 0;
        return;                 /* not sparse yet: look again when it is */
    }
    pg->swept_used = pg->used;
}

/* Purges the pages that stayed retired for at least `delay` ms (small) or
 * `medium_delay` ms (medium); 0 and 0 purge them all. */
static void purge_retired(struct heap *h, uint64_t now, uint64_t delay, uint64_t medium_delay)
{
    for (unsigned k = 0; k < 2; k++) {
        struct page *pg;
        uint64_t keep = k == 0 ? delay : medium_delay;
        while ((pg = h->retired[k].first) && now - pg->retired_at >= keep) {
            heap_unretire(h, pg);
            heap_purge_page(h, pg);
        }
    }
}

/* Retires every empty page, gives back free memory inside live ones, then
 * purges pages retired for >= delay ms. */
static void heap_collect(struct heap *h, uint64_t now, uint64_t delay)
{
    /* The sweep's purges go to the kernel together (os.h): nothing below
     * hands memory on before the close but segment_free, which flushes.
     * With several threads running, mstress took 15% less time this way,
     * prodcons and rssfoot 12% less. */
    struct os_purge_batch batch;
    if (init_purge_batch())
        os_purge_batch_open(&batch);
    /* Two speeds. Small pages: purging a sparse page's free OS pages or an
     * empty page costs a fault per OS page when they are used again, and a
     * churning program reuses them within tens of ms (10 ms cost rssfoot
     * 20% and frag 28% of their time against 100 ms). Medium pages: a
     * class's page is 1 MiB (it was a whole 4 MiB segment when this was
     * measured), so their free memory goes back sooner, after a quarter
     * of the delay (at 100 ms mstress peaked 11% higher). A tenth was
     * too soon for threads that wait for a CPU: the wall clock runs on
     * while they are off it, and mstress at 8 threads on 2 CPUs purged
     * and faulted its medium pages back in again and again: 1.95 s
     * against 1.31 with a quarter, 163k faults. */
    uint64_t medium_delay = delay / MEDIUM_DELAY_DIVISOR;
    bool small_due = delay == 0 || now >= h->next_small_sweep_ms;
    /* A page found empty now emptied at some point since the last sweep:
     * date it from there, so a heap that sat idle for longer than the
     * delay gives its empty pages back at its first sweep. */
    uint64_t since = h->last_sweep_ms ? h->last_sweep_ms : now;
    bool at_once = delay == 0 || now - since >= delay;
    __atomic_store_n(&h->last_sweep_ms, now, __ATOMIC_RELAXED);   /* read by heap_life.c */
    if (small_due)
        h->next_small_sweep_ms = now + delay / 2;
    for (unsigned cls = small_due ? 0 : NUM_SMALL_CLASSES; cls < NUM_CLASSES; cls++) {
        struct page *pg = h->queue[cls].first, *next;
        for (; pg; pg = next) {
            next = pg->next;
            if (pg->used == 0)
                heap_retire_page(h, pg, since);
            else
                heap_sweep_live_page(h, pg, at_once, now, medium_delay);
        }
    }
    purge_retired(h, now, delay, medium_delay);
    os_purge_batch_close(&batch);
}

/* A block another thread freed, back on its page. */
static void heap_free_returned(struct heap *h, struct block *b)
{
    heap_free_block(h, segment_page_of(segment_of(b), b), b);
}

#define DRAIN_AHEAD 8

/* Asks for a block's line in a state this core may write to. A plain
 * prefetch (what __builtin_prefetch(p, 1) compiles to without -mprfchw)
 * brings the line shared, and the link store then stalls a second time to
 * take it from the freeing thread's core: that stall was 65% of the drain
 * in prodcons. PREFETCHW is asked of the CPU once (CPUID traps to the
 * hypervisor in a VM, so never per drain); without it, the plain one. */
static bool cpu_has_prefetchw(void)
{
#if defined(__x86_64__)
    static int state;           /* 0: not asked yet, 1: the CPU has it, 2: not */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (unlikely(!s)) {
        unsigned a, b, c, d;
        s = __get_cpuid(0x80000001, &a, &b, &c, &d) && (c & bit_PRFCHW) ? 1 : 2;
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return s == 1;
#else
    return false;
#endif
}

static ALWAYS_INLINE void prefetch_for_write(const void *p, bool w)
{
#if defined(__x86_64__)
    if (w) {
        __asm__("prefetchw %0" : : "m"(*(const char *)p));
        return;
    }
#endif
    (void)w;
    __builtin_prefetch(p, 1);
}

/* Takes every block other threads freed into h and frees it locally:
 * whole transfer buffers (independent loads), then the rare chain of
 * blocks pushed one by one when no buffer could be had. */
static void heap_drain_remote(struct heap *h)
{
    if (atomic_load_explicit(&h->remote_bufs, memory_order_relaxed)) {
        struct remote_buf *list = atomic_exchange_explicit(&h->remote_bufs, NULL,
                                                           memory_order_acquire);
        struct remote_buf *last = NULL;
        unsigned n = 0;
        bool w = cpu_has_prefetchw();
        for (struct remote_buf *rb = list; rb; rb = rb->next) {
            last = rb;
            n++;
            /* Each block's line was last on the freeing thread's core:
             * ask for it (for writing) a few blocks ahead. */
            for (uint32_t i = 0; i < rb->count && i < DRAIN_AHEAD; i++)
                prefetch_for_write(rb->blocks[i], w);
            for (uint32_t i = 0; i < rb->count; i++) {
                if (i + DRAIN_AHEAD < rb->count)
                    prefetch_for_write(rb->blocks[i + DRAIN_AHEAD], w);
                heap_free_returned(h, rb->blocks[i]);
            }
        }
        remote_recycle(list, last, n);
    }
    if (atomic_load_explicit(&h->remote, memory_order_relaxed) == NULL)
        return;
    struct block *b = atomic_exchange_explicit(&h->remote, NULL, memory_order_acquire);
    while (b) {
        struct block *next = block_next(b);
        heap_free_returned(h, b);
        b = next;
    }
}

/* Takes back h's remote frees, then sweeps it: what every path that puts
 * a heap in order outside its own slow path does (exit, trim, pool sweep). */
void heap_tidy(struct heap *h, uint64_t now, uint64_t delay)
{
    heap_drain_remote(h);
    heap_collect(h, now, delay);
}


/* ---- kept blocks (remote.h) ------------------------------------------- */

size_t heap_kept_bytes(const struct heap *h)
{
    if (!heap_may_keep(h))
        return 0;
    size_t bytes = 0;
    for (unsigned cls = 0; cls < NUM_SMALL_CLASSES; cls++)
        bytes += (size_t)(h->kept[cls].touched - h->kept[cls].used) * sizeclass_block_size[cls];
    return bytes;
}

/* Sends other heaps' blocks home: kept lists (every one, or only those
 * nobody took from since the last sweep: a kept list's swept_used is its
 * `used` at that sweep), then the thread's partial transfer buffers. */
static void heap_send_home(struct heap *h, bool idle_only)
{
    for (unsigned cls = 0; cls < NUM_SMALL_CLASSES && heap_may_keep(h); cls++) {
        struct page *k = &h->kept[cls];
        bool idle = k->used == k->swept_used;
        /* Written only when it moved: a heap that never kept a block
         * leaves its kept lists' page untouched (heap.h). */
        if (!idle)
            k->swept_used = k->used;
        if (!k->free || (idle_only && !idle))
            continue;
        if (h->current[cls] == k)
            heap_set_current(h, cls, &page_empty);
        struct block *list = k->free;
        k->free = NULL;
        k->touched = k->used;
        remote_send_home(list);
    }
    remote_flush();
}

void heap_tidy_own(struct heap *h, uint64_t now, uint64_t delay)
{
    heap_lock_own(h);
    heap_send_home(h, false);
    heap_tidy(h, now, delay);
    heap_unlock_own(h);
}

/* Whether h's periodic sweep is due: its interval passed, or a
 * malloc_trim asked every heap to purge (the epoch). */
static bool heap_sweep_due(const struct heap *h, uint64_t now)
{
    return now >= h->next_collect_ms ||
           h->trim_epoch != atomic_load_explicit(&heap_trim_epoch, memory_order_relaxed);
}

/* The periodic sweep, with the trim lock held (or h shared). */
static void heap_sweep(struct heap *h, uint64_t now)
{
    uint64_t epoch = atomic_load_explicit(&heap_trim_epoch, memory_order_relaxed);
    uint64_t delay = h->trim_epoch == epoch ? init_purge_delay_ms() : 0;
    h->trim_epoch = epoch;
    heap_send_home(h, delay != 0);
    heap_collect(h, now, delay);
    span_keep_sweep(&h->keep, delay == 0);
    uint64_t interval = delay / SWEEP_DIVISOR;
    h->next_collect_ms = now + (interval ? interval : 1);
    heap_tidy_abandoned(now);
    large_expire(false);
    background_poke();
}

/* The periodic sweep, run from the allocation slow path. */
static void heap_maybe_collect(struct heap *h)
{
    uint64_t now = os_now_ms();
    if (heap_sweep_due(h, now))
        heap_sweep(h, now);
}

/* From malloc's fast path every HEAP_TICK blocks: the due check needs no
 * lock (only h's thread writes what it reads), the sweep does. */
void *heap_tick(struct heap *h, void *b)
{
    h->tick = HEAP_TICK;
    uint64_t now = os_now_ms();
    if (heap_sweep_due(h, now)) {
        heap_lock_own(h);
        heap_sweep(h, now);
        heap_unlock_own(h);
        background_resume();
    }
    return b;
}

/* Young heaps. A heap's first block of each class takes an OS page of
 * its own, and each class keeps the most blocks it ever held at once. A
 * thread that allocates a little and exits (threadchurn: 100 blocks of
 * 16-1,024 B over 32 classes, thousands of threads through each heap)
 * leaves a heap holding far more than its blocks. So a heap starts young:
 * the small classes from SIZECLASS_COARSE_FIRST up go in pairs
 * (sizeclass.h), half as many pages, each pair's count pooled. Once it
 * has set up HEAP_YOUNG_PAGES pages for a class it has volume enough for
 * the finer classes' 6 % average rounding to matter more (25 % at most
 * while young), and it matures for good: every class its own pages.
 * (24 pages: 32 kept larson's heaps young long enough to cost it 0.6 MiB
 * of peak; 16 matured threadchurn's.) A young heap does not lend
 * (heap_borrow): a pair's block plus a lent one would exceed a request by
 * up to half. */
void heap_mature(struct heap *h)
{
    h->pages_taken = HEAP_YOUNG_PAGES;
    for (unsigned cls = SIZECLASS_COARSE_FIRST; cls < NUM_SMALL_CLASSES; cls++)
        heap_set_current(h, cls, h->current[cls]);
}

static void heap_page_set_up(struct heap *h)
{
    if (heap_young(h) && ++h->pages_taken == HEAP_YOUNG_PAGES)
        heap_mature(h);
}

/* The class's last retired page, else the newest retired page of its
 * kind (what its old class wrote given back to a class that writes
 * sparsely: above), else NULL. A page
 * that changes class keeps what the old class touched until the sweep
 * trims it, so the same class matters: looking only 8 pages back along
 * the retired list (there are 56 small and 48 medium classes) took
 * mstress's peak to 16.1 MiB, the class's last retired page to
 * 13.1-13.7; an 8-page walk kept beside it changed nothing measurable
 * (mstress 13.4 MiB either way) and went. */
static struct page *heap_retired_page(struct heap *h, unsigned cls)
{
    struct page *pg = h->retired_of[cls];
    if (pg) {
        heap_unretire(h, pg);
        return pg;
    }
    if ((pg = h->retired[kind_of_class(cls)].last)) {
        heap_unretire(h, pg);
        heap_page_set_up(h);
        heap_take_written(segment_of(pg), pg, cls);
    }
    return pg;
}

/* A small class about to take a fresh page borrows a free block of one of
 * the next SIZECLASS_BORROW_REACH classes up instead (sizeclass.h), if one
 * of their first pages has one: that block, or NULL. The class's current
 * page stays page_empty until one of its blocks is freed and puts its page
 * back on the queue, or the bound below sends it to a fresh page.
 * Why: a class's pages are sized for the most blocks it ever held at once,
 * and a page goes back only once it is empty, so under random churn each
 * class keeps the holes of its own highest excursion. On rssfoot's objects
 * (16..4096 B) RSS grew 86.5 -> 88.2 MiB from 0.5M to 5M replacements,
 * with 6.0 MiB of holes beside 80 MiB in use; with neighbours lending,
 * 85.7 -> 86.7 MiB and 4.4 MiB of holes: the holes are sized for the
 * excursions of a few classes together.
 * Only blocks on a free list, memory already touched: a fresh run would
 * cost the RSS this saves. The block stays its page's, so free() needs no
 * change. Not the 16-byte classes (up to three times the request, for
 * little), not medium classes (their free blocks are purged, so a
 * borrowed one faults like a fresh one, and it keeps a page from
 * emptying: mstress 13.2 -> 16.1 MiB when they lent, with pages of a
 * whole segment), and not while a mode is on, so timing sees each size
 * in its own class.
 * At most HEAP_BORROW_MAX blocks in a row: a borrowing class has no
 * current page, so each of its mallocs takes this slow path, and a class
 * whose neighbours hold many holes would never get off it (a malloc+free
 * pair of 150 B beside 90,000 freed 176 B blocks: 10.2 -> 28.8 ns; with
 * the bound 10.9, and rssfoot's RSS as without it). */
#define HEAP_BORROW_MAX 32
static struct block *heap_borrow(struct heap *h, unsigned cls)
{
    if (cls < SIZECLASS_BORROW_FIRST || cls >= NUM_SMALL_CLASSES ||
        h->borrowed[cls] >= HEAP_BORROW_MAX || hooks_on() || heap_young(h))
        return NULL;
    for (unsigned c = cls + 1; c < NUM_SMALL_CLASSES && c <= cls + SIZECLASS_BORROW_REACH; c++) {
        int looked = 0;
        for (struct page *q = h->queue[c].first; q && looked < 4; q = q->next, looked++) {
            if (q->free) {
                if (h->current[cls] != &page_empty)
                    heap_set_current(h, cls, &page_empty);
                h->borrowed[cls]++;
                q->swept_used = UINT32_MAX;     /* as in heap_set_current */
                return page_try_pop(q);
            }
        }
    }
    return NULL;
}

/* Whether every page s has in use is empty: retired, or emptied since
 * the last sweep and still in its class's queue, when the heap's last
 * page went to the kind that asks now (a phase of one kind under way).
 * Taken at once while the kinds take pages by turns, emptied pages that
 * their own kind would have reused cost a program whose small and medium
 * blocks come and go together (mstress) 5% of its peak. Most segments
 * answer at their first page. */
static bool segment_emptied(const struct heap *h, const struct segment *s)
{
    if (s->pages_retired == s->pages_in_use)
        return true;
    if (h->last_took == s->kind)
        return false;
    for (unsigned i = 0; i < s->page_count; i++) {
        if (!(s->free_pages >> i & 1) && s->pages[i].used)
            return false;
    }
    return true;
}

/* One of h's segments of the other kind whose pages in use are all
 * empty, set up for `kind` where it lies with its memory as it is, or
 * NULL; *end: the bytes from its start that may have been written,
 * *retired_at (unless NULL): when its last page emptied (now, for one the
 * sweep has not retired yet). A program that frees its small blocks while
 * it allocates medium ones (w_phase: 20,000 blocks of 4,000 B, each grown
 * with realloc to 8.5-16 KB, 5 rounds) held the emptied small pages for
 * their purge delay beside fresh medium segments, and the next round's
 * small blocks faulted in fresh pages beside the emptied medium ones:
 * 310 MiB of peak taking segments whose pages the sweep retired, 264
 * taking those it has not got to yet as well (it retires small pages
 * every 50 ms, and a phase's segments empty in between; glibc, whose
 * freed chunks serve any size, 236). The pages go back to the segment
 * unpurged, but for what lies under a medium segment's header, purged
 * here. */
static struct segment *heap_rekinded_segment(struct heap *h, enum segment_kind kind, size_t *end,
                                             uint64_t *retired_at)
{
    if (init_secure())
        return NULL;            /* its guard pages stay where they are */
    struct segment *s = h->segments;
    while (s && (s->kind == kind || !s->pages_in_use || !segment_emptied(h, s)))
        s = s->next;
    if (!s)
        return NULL;
    *end = 0;
    uint64_t newest = 0;
    bool unswept = false;
    for (unsigned i = 0; i < s->page_count; i++) {
        struct page *pg = &s->pages[i];
        if (s->free_pages >> i & 1)
            continue;           /* released, so purged */
        size_t start = segment_area_start((enum segment_kind)s->kind, i);
        size_t written = align_up(pg->touched, OS_PAGE);
        if (written && start + written > *end)
            *end = start + written;
        if (written && kind == SEG_MEDIUM && start < MEDIUM_HEADER)
            os_purge((char *)s + start, MEDIUM_HEADER - start < written ? MEDIUM_HEADER - start
                                                                        : written);
        if (pg->flags & PAGE_RETIRED) {
            newest = pg->retired_at > newest ? pg->retired_at : newest;
            heap_unretire(h, pg);
        } else {
            unswept = true;
            heap_unqueue_empty(h, pg);
        }
        segment_release_page(s, pg);
    }
    os_purge_flush();
    segment_rekind(s, kind);
    if (retired_at)
        *retired_at = unswept ? os_now_ms() : newest;
    return s;
}

/* Notes in pg, just taken from s, what the segment's old pages wrote of
 * its area: the bytes from the segment's start up to `end`. */
static void page_note_written(struct segment *s, struct page *pg, size_t end)
{
    size_t start = segment_area_start((enum segment_kind)s->kind, pg->index);
    size_t area = page_area_size(s, pg);
    pg->touched = end <= start ? 0 : (uint32_t)(end - start < area ? end - start : area);
}

/* The pages of s, a segment that changed kind (above), past its first
 * that its old pages wrote: each becomes a retired page of cls, to be
 * reused by any class of the new kind (a free page of a segment is taken
 * to be purged), dated `at`, at the list's oldest end or its newest.
 * Whether there was any. */
static bool heap_retire_written(struct heap *h, struct segment *s, size_t end, unsigned cls,
                                uint64_t at, bool oldest)
{
    bool any = false;
    for (unsigned i = s->page_count - 1u; i >= 1; i--) {
        if (end <= segment_area_start((enum segment_kind)s->kind, i))
            continue;
        struct page *pg = segment_take_page_at(s, i);
        page_note_written(s, pg, end);
        page_init(s, pg, cls);
        heap_retired_push(h, pg, at, oldest);
        any = true;
    }
    return any;
}

/* A segment that was medium made small (above): its written pages are
 * purged when the medium page would have been: dated back by the
 * difference of the two delays, at the list's oldest end. Whether there
 * was any. */
static bool heap_rekind_to_small(struct heap *h, unsigned cls)
{
    size_t end;
    uint64_t since;
    struct segment *s = heap_rekinded_segment(h, SEG_SMALL, &end, &since);
    if (!s)
        return false;
    uint64_t delay = init_purge_delay_ms(), back = delay - delay / MEDIUM_DELAY_DIVISOR;
    return heap_retire_written(h, s, end, cls, since > back ? since - back : 0, true);
}

/* A small segment the heap emptied, made medium (above): page 0 for cls,
 * the others it wrote retired for the next medium classes, purged after
 * the medium delay. NULL when there is no such segment. */
static struct page *heap_rekind_to_medium(struct heap *h, unsigned cls)
{
    size_t end;
    struct segment *s = heap_rekinded_segment(h, SEG_MEDIUM, &end, NULL);
    if (!s)
        return NULL;
    heap_retire_written(h, s, end, cls, os_now_ms(), false);
    struct page *pg = segment_take_page_at(s, 0);
    page_note_written(s, pg, end);
    page_init(s, pg, cls);      /* never a sparse class's (heap_fresh_page) */
    return pg;
}

/* A fresh page for cls: for a medium class (unless it writes sparsely)
 * first the pages of a small segment the heap emptied (above); then a
 * free page of one of h's segments of the class's kind, else a page of a
 * new segment. (A small class finds a medium segment's pages retired:
 * alloc_slow_locked asks heap_rekind_to_small first.) A class that writes
 * sparsely would give back the segment's written pages, which the next
 * small phase finds warm otherwise: blocks of 100,000 B allocated and
 * freed between two phases cost the second 1,441 page faults
 * (test_purge.c, swap_kinds). */
static struct page *heap_fresh_page(struct heap *h, unsigned cls)
{
    enum segment_kind kind = kind_of_class(cls) ? SEG_MEDIUM : SEG_SMALL;
    struct page *pg;
    heap_page_set_up(h);
    if (kind == SEG_MEDIUM && !class_writes_sparsely(cls) && (pg = heap_rekind_to_medium(h, cls)))
        return pg;
    for (struct segment *s = h->segments; s; s = s->next) {
        if (s->kind == kind && (pg = segment_take_page(s))) {
            page_init(s, pg, cls);
            return pg;
        }
    }
    struct segment *s = segment_alloc(h, h->tag, kind);
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

/* A page of cls's queue other than pg, among the first four (a class with
 * many pages looks no further), that has blocks on its free list; NULL
 * when none has. */
static struct page *heap_queued_with_free(const struct heap *h, unsigned cls,
                                          const struct page *pg)
{
    int looked = 0;
    for (struct page *q = h->queue[cls].first; q && looked < 4; q = q->next, looked++)
        if (q != pg && q->free)
            return q;
    return NULL;
}

/* The first step of the slow path, with h's lock held: a page still
 * being carved carves its next run (page.c), without the sweep, the clock
 * or the drain. NULL when that does not apply (page_empty and kept lists
 * have capacity 0), when other threads' frees wait in h's stack, and when
 * another page of the class has free blocks: blocks that came back go out
 * before fresh memory is touched. The lock, because the look at the
 * class's queue races with heap_trim_other, which takes empty pages off
 * it and may unmap their segment.
 * Precondition: pg is a current page (its list is checked: a mode switched
 * off by another thread between malloc's two reads of the limit can send a
 * page with free blocks here). */
static void *heap_carve_current(struct heap *h, struct page *pg)
{
    if (!page_can_carve(pg) || pg->free != NULL || !heap_no_remote(h))
        return NULL;
    /* Between two runs, blocks freed into the class's older pages go out
     * first: else a page carves its whole area while frees pile up in
     * the older ones (a queue of messages, freed in the order it was
     * allocated), and every class holds up to a page of resident slack
     * (a FIFO probe, docs/benchmarks.md: 11.6 -> 11.3 MiB of peak; glibc
     * 10.8). The slow path below takes them. */
    if (!page_has_fresh(pg) && heap_queued_with_free(h, pg->cls, pg))
        return NULL;
    return page_extend(pg);
}

static void *alloc_slow_locked(struct heap *h, unsigned cls, bool exact)
{
    struct page *pg = h->current[cls];
    /* The current page's list ran dry while the class's kept list gathered
     * blocks (heap_keep): those go out next, before the page carves. */
    if (cls < NUM_SMALL_CLASSES && heap_may_keep(h) && h->kept[cls].free && pg != &h->kept[cls]) {
        heap_set_current(h, cls, &h->kept[cls]);
        return page_pop(&h->kept[cls]);
    }
    /* Still carving the current page (a run the fast path could not take,
     * or the next run of a page carved an OS page at a time: one taken over
     * from another class, or secure mode's): no sweep, clock or drain. */
    void *carved = heap_carve_current(h, pg);
    if (carved)
        return carved;
    heap_maybe_collect(h);
    heap_drain_remote(h);
    pg = h->current[cls];       /* the sweep may have retired it or sent kept blocks home */
    if (heap_is_kept(h, pg))
        pg = &page_empty;       /* kept blocks ran dry: back to the own pages */
    if (pg != &page_empty) {
        if (pg->free)
            return page_pop(pg);
        if (!page_has_room(pg)) {
            pg->flags |= PAGE_FULL;
            page_queue_remove(&h->queue[cls], pg);
            pg = &page_empty;
        }
    }
    /* Blocks that came back (the drain above) before fresh memory. */
    struct page *q = heap_queued_with_free(h, cls, pg);
    if (q) {
        heap_set_current(h, cls, q);
        return page_pop(q);
    }
    if (pg != &page_empty)
        return page_pop(pg);
    while ((pg = h->queue[cls].first)) {
        if (page_has_room(pg)) {
            heap_set_current(h, cls, pg);
            return page_pop(pg);
        }
        pg->flags |= PAGE_FULL;
        page_queue_remove(&h->queue[cls], pg);
    }
    pg = heap_retired_page(h, cls);
    if (!pg && cls < NUM_SMALL_CLASSES && heap_rekind_to_small(h, cls))
        pg = heap_retired_page(h, cls);
    if (!pg) {
        struct block *b = exact ? NULL : heap_borrow(h, cls);
        if (b)
            return b;
        pg = heap_fresh_page(h, cls);
    }
    if (!pg) {
        heap_set_current(h, cls, &page_empty);
        return NULL;
    }
    h->last_took = kind_of_class(cls) ? SEG_MEDIUM : SEG_SMALL;
    page_queue_push(&h->queue[cls], pg);
    heap_set_current(h, cls, pg);
    return page_pop(pg);
}

void *heap_alloc_slow(struct heap *h, unsigned cls, bool exact)
{
    heap_lock_own(h);
    void *p = alloc_slow_locked(h, cls, exact);
    heap_unlock_own(h);
    return p;
}

/* The one look heap_trim_other takes at what h's thread changes without
 * the lock: whether pg is its class's current page (heap_keep switches to
 * a kept list), and its count of blocks in use (the fast paths). A page
 * neither current nor in use cannot become either until the owner's slow
 * path, which waits for the lock; and a free that brought the count to 0
 * touches the page no more (page_push_block). Out of line: the TSan run
 * suppresses exactly these reads by this name (tests/sanitize/tsan.supp). */
static NOINLINE bool trim_may_take(const struct heap *h, unsigned cls, const struct page *pg)
{
    return __atomic_load_n(&h->current[cls], __ATOMIC_RELAXED) != pg &&
           __atomic_load_n(&pg->used, __ATOMIC_ACQUIRE) == 0;
}

void heap_trim_other(struct heap *h, uint64_t now)
{
    if (!heap_trylock(h))
        return;
    struct os_purge_batch batch;
    if (init_purge_batch())
        os_purge_batch_open(&batch);
    for (unsigned cls = 0; cls < NUM_CLASSES; cls++) {
        struct page *pg = h->queue[cls].first, *next;
        for (; pg; pg = next) {
            next = pg->next;
            if (trim_may_take(h, cls, pg)) {
                page_queue_remove(&h->queue[cls], pg);
                heap_purge_page(h, pg);
            }
        }
    }
    purge_retired(h, now, 0, 0);
    os_purge_batch_close(&batch);
    heap_unlock_own(h);
}
