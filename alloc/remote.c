/*
 * remote.c - transfer buffers for frees into another thread's heap (see
 * the header): the per-thread batch, the buffer pool, the hand-over.
 */
#include "remote.h"
#include "heap.h"
#include "os.h"
#include "lock.h"

#include <pthread.h>

/* Target heaps a thread gathers for at once, by tag (heaps are numbered
 * from 1 as threads first need one, and reused): with 4, larson's 8
 * threads and main on 2 CPUs evicted a buffer every block or two, 1.78 s
 * and 134 MiB against 0.60 s and 43 MiB with 64. 1 KiB of TLS. */
#define SLOTS       64    /* a bit each in remote_batch.adopting */
_Static_assert(SLOTS <= 64, "remote_batch.adopting has a bit per slot");
#define CHAIN_MAX   8     /* a buffer leaving its slot with fewer blocks goes
                             as a chain (buf_evict) */
#define SPARE_MAX   16    /* empty buffers a thread keeps for itself */
#define POOL_GRAB   8     /* buffers carved at once when the pool is empty */
#define CHUNK_BYTES (64 * 1024)
#define KEPT_RECHECK 8    /* full buffers between two counts of the kept bytes */

static __thread struct remote_batch {
    struct heap *to[SLOTS];
    struct remote_buf *buf[SLOTS];
    struct remote_buf *spare;
    unsigned spare_count;
    bool registered;            /* exit hook set for this thread */
    bool sending_home;          /* remote_send_home: no adoption */
    bool exited;                /* remote_thread_exit ran (see there) */
    /* The slots whose heaps this thread adopts from one block at a time,
     * since it adopted a whole buffer of theirs (bit s: the heap to[s]);
     * cleared at every sweep (remote_flush), so an owner that starts
     * draining again gets its blocks back within one interval. */
    uint64_t adopting;
    /* The bytes the thread's heap keeps, with what it kept since they
     * were counted added (kept blocks handed out since only make it too
     * high, on the safe side). heap_kept_bytes walks every small class,
     * about 500 instructions, and counting on every full buffer was 6% of
     * prodcons's instructions: there the owner's stack is deep while the
     * consumer's kept bytes sit at the bound. So they are counted every
     * KEPT_RECHECK full buffers, after each sweep, and at once when a
     * one-by-one adoption runs out of room: a thread adopting from a
     * sleeping owner hands its kept blocks out about as fast as it keeps
     * them, and a stale count there sent larson's pool home to the
     * sleeping main thread (0.60 -> 0.73 s per 10M, 9.9 -> 16.3 MiB). A
     * buffer that did not fit marks the bytes full until the next count. */
    size_t kept_seen;
    unsigned kept_recheck;      /* full buffers until the next count */
} tls_batch TLS_IE;

/* The heap of the latest adoption while its bit in `adopting` is set,
 * else TAG_EMPTY (remote.h). */
HIDDEN __thread uint16_t tls_adopt_tag TLS_IE = TAG_EMPTY;

/* Ends one-by-one adoption for slot s (its heap sends its blocks through
 * buffers again). */
static void adopt_end(struct remote_batch *rb, unsigned s)
{
    rb->adopting &= ~((uint64_t)1 << s);
    if ((tls_adopt_tag & (SLOTS - 1)) == s)
        tls_adopt_tag = TAG_EMPTY;
}

static pthread_key_t batch_key;

/* Empty buffers: a lock-free stack that takes whole lists and gives
 * itself away whole (so no pop can meet a recycled head: no ABA). A
 * mutex here was taken once per drain that overflowed the spares and
 * once per 8 buffers refilled; under prodcons's bursts the two threads
 * met on it: 1,400 futex calls in a 0.2 s run. */
static _Atomic(struct remote_buf *) pool;
static pthread_mutex_t chunk_lock = PTHREAD_MUTEX_INITIALIZER;
static char *chunk;                 /* where new buffers are carved */
static size_t chunk_left;

/* A thread that holds buffers needs an exit hook to hand them back: a
 * consumer that only frees has no heap and no other hook. */
static void batch_register(struct remote_batch *rb)
{
    if (likely(rb->registered))
        return;
    rb->registered = true;
    pthread_setspecific(batch_key, (void *)1);
}

static void batch_exit_hook(void *arg)
{
    (void)arg;
    remote_thread_exit();
}

/* ---- the pool ------------------------------------------------------------ */

/* Precondition: the spare list is empty. Leaves it empty only when out of
 * memory. Takes the whole pool when it has any: the buffers circulate
 * between threads that free into each other, in bursts. */
static void pool_refill(struct remote_batch *rb)
{
    struct remote_buf *all = atomic_exchange_explicit(&pool, NULL, memory_order_acquire);
    if (all) {
        rb->spare = all;
        for (struct remote_buf *b = all; b; b = b->next)
            rb->spare_count++;
        return;
    }
    lock_take(&chunk_lock);
    for (unsigned i = 0; i < POOL_GRAB; i++) {
        if (chunk_left < sizeof(struct remote_buf)) {
            chunk = os_map(CHUNK_BYTES);
            chunk_left = chunk ? CHUNK_BYTES : 0;
            if (!chunk)
                break;
        }
        struct remote_buf *b = (struct remote_buf *)chunk;
        chunk += sizeof *b;
        chunk_left -= sizeof *b;
        b->next = rb->spare;
        rb->spare = b;
        rb->spare_count++;
    }
    lock_give(&chunk_lock);
}

static void pool_give(struct remote_buf *list, struct remote_buf *last)
{
    struct remote_buf *head = atomic_load_explicit(&pool, memory_order_relaxed);
    do {
        last->next = head;
    } while (!atomic_compare_exchange_weak_explicit(&pool, &head, list, memory_order_release,
                                                    memory_order_relaxed));
}

static struct remote_buf *buf_take(struct remote_batch *rb)
{
    if (!rb->spare && !rb->exited)
        pool_refill(rb);
    struct remote_buf *b = rb->spare;
    if (b) {
        rb->spare = b->next;
        rb->spare_count--;
        b->next = NULL;
        b->count = 0;
        b->medium_kib = 0;
    }
    return b;
}

/* ---- hand-over ----------------------------------------------------------- */

/* A stale head (drained and reused meanwhile) only skews the depth, a
 * hint; the CAS keeps the stack itself right. */
static uint32_t buf_depth(struct remote_buf *head)
{
    return head ? __atomic_load_n(&head->depth, __ATOMIC_RELAXED) : 0;
}

/* Acquire on the loads of the head: its depth was written before it was
 * pushed. */
static void buf_push(struct heap *h, struct remote_buf *b)
{
    struct remote_buf *head = atomic_load_explicit(&h->remote_bufs, memory_order_acquire);
    do {
        b->next = head;
        __atomic_store_n(&b->depth, buf_depth(head) + b->count, __ATOMIC_RELAXED);
    } while (!atomic_compare_exchange_weak_explicit(&h->remote_bufs, &head, b,
                                                    memory_order_release,
                                                    memory_order_acquire));
}

/* Keeps a full buffer's blocks in the caller's own heap instead of pushing
 * it onto h's deep stack (see the header); false to push it after all. */
static bool buf_adopt(struct remote_batch *rb, struct heap *h, struct remote_buf *buf)
{
    struct heap *me = tls_heap;
    /* The debug heap's blocks carry debug headers: never hand them out. */
    if (rb->sending_home || me == &heap_empty ||
        h->tag == __atomic_load_n(&heap_debug_tag, __ATOMIC_RELAXED) ||
        buf_depth(atomic_load_explicit(&h->remote_bufs, memory_order_acquire)) <
            REMOTE_ADOPT_DEPTH)
        return false;
    if (rb->kept_recheck == 0) {
        rb->kept_seen = heap_kept_bytes(me);
        rb->kept_recheck = KEPT_RECHECK;
    }
    rb->kept_recheck--;
    if (rb->kept_seen >= REMOTE_KEPT_MAX)
        return false;
    size_t bytes = 0;
    uint8_t cls[REMOTE_BUF_BLOCKS];
    for (uint32_t i = 0; i < buf->count; i++) {
        const struct page_shape *sh = segment_shape_of(segment_of(buf->blocks[i]),
                                                       buf->blocks[i]);
        if (sh->cls >= NUM_SMALL_CLASSES)
            return false;
        cls[i] = sh->cls;
        bytes += sh->block_size;
    }
    size_t kept = rb->kept_seen + bytes;
    if (kept > REMOTE_KEPT_MAX) {
        rb->kept_seen = REMOTE_KEPT_MAX;    /* full until the next count */
        return false;
    }
    for (uint32_t i = 0; i < buf->count; i++)
        heap_keep(me, buf->blocks[i], cls[i]);
    buf->next = NULL;
    remote_recycle(buf, buf, 1);
    rb->adopting |= (uint64_t)1 << (h->tag & (SLOTS - 1));
    tls_adopt_tag = h->tag;
    rb->kept_seen = kept;
    return true;
}

/* Splices first..last, already linked, onto h's chain of single blocks. */
static void chain_push(struct heap *h, struct block *first, struct block *last)
{
    struct block *head = atomic_load_explicit(&h->remote, memory_order_relaxed);
    do {
        block_set_next(last, head);
    } while (!atomic_compare_exchange_weak_explicit(&h->remote, &head, first,
                                                    memory_order_release,
                                                    memory_order_relaxed));
}

/* A buffer leaves its slot before it is full (the slot changes hands, or
 * the thread sweeps): it goes to its heap, unless it holds fewer than
 * CHAIN_MAX blocks. Those go onto the heap's chain instead, linked through
 * the blocks, with one CAS, and the emptied buffer is returned for reuse.
 * A thread that frees into more heaps than it has slots evicts after a
 * block or two, and a buffer per block or two, sitting on owners that
 * were not running, came to tens of MiB of buffers for larson at 8 threads
 * on 2 CPUs when there were 4 slots. NULL when the buffer was pushed. */
static struct remote_buf *buf_evict(struct heap *h, struct remote_buf *buf)
{
    if (buf->count >= CHAIN_MAX) {
        buf_push(h, buf);
        return NULL;
    }
    for (uint32_t i = 0; i + 1 < buf->count; i++)
        block_set_next(buf->blocks[i], buf->blocks[i + 1]);
    if (buf->count)
        chain_push(h, buf->blocks[0], buf->blocks[buf->count - 1]);
    buf->count = 0;
    return buf;
}

/* buffer_free's rare cases: the slot has no buffer yet or holds another
 * heap's, or b fills the buffer. */
static NOINLINE void buffer_free_slow(struct remote_batch *rb, struct heap *h, uint16_t tag,
                                      struct block *b)
{
    unsigned s = tag & (SLOTS - 1);
    if (rb->to[s] != h) {                       /* the slot changes hands */
        adopt_end(rb, s);                       /* that bit was for to[s] */
        if (rb->buf[s])
            rb->buf[s] = buf_evict(rb->to[s], rb->buf[s]);
        rb->to[s] = h;
    }
    struct remote_buf *buf = rb->buf[s];
    if (!buf) {
        buf = rb->buf[s] = buf_take(rb);
        if (!buf) {             /* out of memory, or the thread exited (see
                                   remote_thread_exit): the block carries the link */
            chain_push(h, b, b);
            return;
        }
        batch_register(rb);
    }
    buf->blocks[buf->count++] = b;
    if (buf->count == REMOTE_BUF_BLOCKS) {
        rb->buf[s] = NULL;
        if (!buf_adopt(rb, h, buf))
            buf_push(h, buf);
    }
}

/* The block goes into the transfer buffer for h. Out of line only when
 * something has to happen besides the append: a short function here saves
 * the register spills of the whole path on every free. */
static inline void buffer_free(struct remote_batch *rb, struct heap *h, uint16_t tag,
                               struct block *b)
{
    unsigned s = tag & (SLOTS - 1);
    struct remote_buf *buf = rb->buf[s];
    if (likely(buf != NULL && rb->to[s] == h && buf->count < REMOTE_BUF_BLOCKS - 1)) {
        buf->blocks[buf->count++] = b;
        return;
    }
    buffer_free_slow(rb, h, tag, b);
}

/* A block for a heap being adopted from that does not fit under the bound
 * on kept bytes: adoption ends until the next full buffer, which looks at
 * the owner's depth and counts the kept bytes again. */
static NOINLINE void adopting_full(struct remote_batch *rb, struct heap *h, uint16_t tag,
                                   struct block *b)
{
    adopt_end(rb, tag & (SLOTS - 1));
    rb->kept_recheck = 0;
    buffer_free(rb, h, tag, b);
}

/* heap_keep out of line: the kept list is not the current page yet. */
static NOINLINE void keep_switching(struct heap *me, struct block *b, unsigned cls)
{
    heap_keep(me, b, cls);
}

/* b, a small block (class cls) of the heap tagged `tag`, one being adopted from,
 * kept by the caller's heap, unless the kept bytes would pass their bound:
 * then adoption from that heap ends and b goes into a buffer. The common
 * case makes no call: the kept list is the current page. */
static ALWAYS_INLINE void keep_adopted(struct remote_batch *rb, uint16_t tag, struct block *b,
                                       uint32_t block_size, unsigned cls)
{
    size_t kept = rb->kept_seen + block_size;
    if (unlikely(kept > REMOTE_KEPT_MAX)) {
        adopting_full(rb, heap_table[tag], tag, b);
        return;
    }
    rb->kept_seen = kept;
    struct heap *me = tls_heap;
    struct page *k = &me->kept[cls];
    if (likely(me->current[cls] == k))
        heap_kept_push(k, b);
    else
        keep_switching(me, b, cls);
}

/* remote_free for a medium block: appended as any other, and the buffer
 * goes to its heap once it holds REMOTE_BUF_MEDIUM_KIB of them (remote.h).
 * (No adoption: kept lists hold small blocks only.) */
static NOINLINE void medium_free(struct remote_batch *rb, struct heap *h, uint16_t tag,
                                 struct block *b, const struct page_shape *sh)
{
    unsigned s = tag & (SLOTS - 1);
    buffer_free(rb, h, tag, b);
    struct remote_buf *buf = rb->buf[s];
    if (!buf || rb->to[s] != h)         /* pushed full, or no buffer to be had */
        return;
    buf->medium_kib += (uint16_t)(sh->block_size >> 10);
    if (buf->medium_kib >= REMOTE_BUF_MEDIUM_KIB) {
        rb->buf[s] = NULL;
        buf_push(h, buf);
    }
}

/* The rare cases leave by a tail call, so the common one (append to the
 * open buffer) saves no registers. */
void remote_free(uint16_t tag, struct block *b, const struct page_shape *sh)
{
    struct remote_batch *rb = &tls_batch;
    struct heap *h = heap_table[tag];
    unsigned s = tag & (SLOTS - 1);
    if (unlikely(sh->cls >= NUM_SMALL_CLASSES)) {
        medium_free(rb, h, tag, b, sh);
        return;
    }
    if (((rb->adopting >> s) & 1) && rb->to[s] == h) {
        /* A heap being adopted from: its next block is kept at once, with
         * no buffer and no look at its stack (the depth only grows while
         * nothing is pushed onto it). Blocks handed out from a kept list
         * come back here when freed, for as long as the owner sleeps. */
        keep_adopted(rb, tag, b, sh->block_size, sh->cls);
        return;
    }
    buffer_free(rb, h, tag, b);
}

void remote_keep(uint16_t tag, struct block *b, const struct page_shape *sh)
{
    unsigned cls = sh->cls;
    if (unlikely(cls >= NUM_SMALL_CLASSES)) {
        remote_free(tag, b, sh);        /* kept lists hold small blocks only */
        return;
    }
    keep_adopted(&tls_batch, tag, b, sh->block_size, cls);
}

void remote_send_home(struct block *list)
{
    struct remote_batch *rb = &tls_batch;
    rb->sending_home = true;
    while (list) {
        struct block *next = block_next(list);
        uint16_t tag = segmap_tag(list);
        buffer_free(rb, heap_table[tag], tag, list);
        list = next;
    }
    rb->sending_home = false;
}

void remote_flush(void)
{
    struct remote_batch *rb = &tls_batch;
    rb->adopting = 0;
    tls_adopt_tag = TAG_EMPTY;
    rb->kept_recheck = 0;       /* the sweep may have sent kept lists home */
    for (unsigned s = 0; s < SLOTS; s++) {
        if (rb->buf[s]) {
            struct remote_buf *left = buf_evict(rb->to[s], rb->buf[s]);
            rb->buf[s] = NULL;
            if (left)
                remote_recycle(left, left, 1);
        }
    }
}

void remote_recycle(struct remote_buf *first, struct remote_buf *last, unsigned n)
{
    struct remote_batch *rb = &tls_batch;
    if (rb->spare_count < SPARE_MAX && !rb->exited) {
        batch_register(rb);
        last->next = rb->spare;
        rb->spare = first;
        rb->spare_count += n;
    } else {
        pool_give(first, last);
    }
}

void remote_thread_exit(void)
{
    struct remote_batch *rb = &tls_batch;
    remote_flush();
    if (rb->spare) {
        struct remote_buf *last = rb->spare;
        while (last->next)
            last = last->next;
        pool_give(rb->spare, last);
    }
    /* Nothing flushes this thread's buffers again, yet it may still free:
     * in a later TLS destructor, and in glibc's own clean-up after every
     * destructor has run (dlerror's and strerror's per-thread buffers).
     * Such a free took a buffer, or the whole pool, and the thread died
     * holding it and the block (5,000 threads that each failed a dlopen
     * left 720 KB allocated and 12 MB resident). So from here on a free
     * goes home on its own, as when no buffer can be had (buf_take), and
     * drained buffers go straight to the pool (remote_recycle). */
    rb->spare = NULL;
    rb->spare_count = 0;
    rb->exited = true;
}

/* ---- start-up and fork --------------------------------------------------- */

void remote_process_init(void) { pthread_key_create(&batch_key, batch_exit_hook); }
void remote_fork_prepare(void) { pthread_mutex_lock(&chunk_lock); }
void remote_fork_parent(void)  { pthread_mutex_unlock(&chunk_lock); }
void remote_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    chunk_lock = fresh;
}
