/*
 * page.c - page set-up for a class, lazy carving, page queues.
 */
#include "page.h"
#include "sizeclass.h"
#include "init.h"
#include "os.h"

#define OS_SHIFT 12
#define MAX_BLOCKS (PAGE_SIZE / 16)

void page_init(struct segment *s, struct page *pg, unsigned cls)
{
    size_t area = page_area_size(s, pg);
    uint8_t *base = (uint8_t *)s + segment_area_start((enum segment_kind)s->kind, pg->index);
    uint32_t bs = sizeclass_block_size[cls];
    pg->cls = (uint8_t)cls;
    pg->capacity = (uint16_t)(area / bs);
    pg->reserved = 0;
    pg->held = 0;
    pg->sparse_seen = 0;
    pg->swept_used = UINT32_MAX;
    pg->used = 0;
    pg->free = NULL;
    pg->flags = s->kind == SEG_MEDIUM ? PAGE_OPEN | PAGE_MEDIUM : PAGE_OPEN;
    pg->fresh = pg->fresh_end = (uint32_t)(base - (uint8_t *)s);   /* nothing carved */
    pg->fresh_size = 0;
    pg->next = pg->prev = NULL;
    *page_shape_of(pg) = (struct page_shape){ .start = base, .block_size = bs,
                                              .cls = (uint8_t)cls, .in_use = 1 };
    os_mark_defined(base, area);
}

/* ---- small helpers ------------------------------------------------------ */

static struct block *page_block(struct page *pg, uint32_t i)
{
    return (struct block *)(page_start(pg) + (size_t)i * page_block_size(pg));
}

static void list_prepend(struct block **head, struct block *b)
{
    block_set_next(b, *head);
    *head = b;
}

static __thread uint64_t tls_rng TLS_IE;

/* xorshift64*, seeded per thread from the block secret and its own address. */
static uint32_t page_random(void)
{
    uint64_t x = tls_rng;
    if (!x)
        x = block_secret ^ (uintptr_t)&tls_rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    tls_rng = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

/* Secure mode's block order: order[0..n) shuffled (Fisher-Yates). */
static COLD_TEXT void shuffle(uint16_t *order, uint32_t n)
{
    for (uint32_t i = n; i > 1; i--) {
        uint32_t j = page_random() % i;
        uint16_t t = order[i - 1];
        order[i - 1] = order[j];
        order[j] = t;
    }
}

static bool map_test(const uint64_t *map, uint32_t i) { return map[i >> 6] >> (i & 63) & 1; }
static void map_set(uint64_t *map, uint32_t i) { map[i >> 6] |= (uint64_t)1 << (i & 63); }

/* ---- held OS pages ---------------------------------------------------- */

/* Whether block i overlaps an OS page in `held`. */
static bool block_is_held(struct page *pg, uint32_t i, uint16_t held)
{
    uint32_t bs = page_block_size(pg);
    uint32_t lo = (i * bs) >> OS_SHIFT, hi = ((i + 1) * bs - 1) >> OS_SHIFT;
    uint32_t span = ((2u << hi) - 1) & ~((1u << lo) - 1);
    return held & span;
}

/* The page ran dry: thread its held blocks back onto the free list (the
 * OS faults their pages in again as they are written) and pop one. */

static NOINLINE struct block *page_unhold(struct page *pg)
{
    uint16_t held = pg->held;
    pg->held = 0;
    struct block *head = NULL;
    if (init_secure()) {
        /* In random order, as secure mode carves (page_extend_shuffled):
         * in address order the blocks of a purged run went out one beside
         * the other. */
        uint16_t order[MAX_BLOCKS];
        uint32_t n = 0;
        for (uint32_t i = 0; i < pg->reserved; i++)
            if (block_is_held(pg, i, held))
                order[n++] = (uint16_t)i;
        shuffle(order, n);
        for (uint32_t i = 0; i < n; i++)
            list_prepend(&head, page_block(pg, order[i]));
    } else {
        for (uint32_t i = pg->reserved; i-- > 0;)
            if (block_is_held(pg, i, held))
                list_prepend(&head, page_block(pg, i));
    }
    pg->free = block_next(head);
    pg->used++;
    return head;
}

/* Marks free blocks in `map`: those on the list and those held. */
static void page_map_free(struct page *pg, uint64_t *map)
{
    uint8_t *start = page_start(pg);
    for (struct block *b = pg->free; b; b = block_next(b))
        map_set(map, sizeclass_div((uint32_t)((uint8_t *)b - start), pg->cls));
    for (uint32_t i = 0; pg->held && i < pg->reserved; i++)
        if (block_is_held(pg, i, pg->held))
            map_set(map, i);
}

static bool map_all_set(const uint64_t *map, uint32_t first, uint32_t last)
{
    for (uint32_t i = first; i <= last; i++)
        if (!map_test(map, i))
            return false;
    return true;
}

void page_purge_free_runs(struct page *pg)
{
    uint32_t bs = page_block_size(pg), n = pg->reserved;
    uint32_t whole = (n * bs) >> OS_SHIFT;    /* OS pages fully carved */
    uint64_t map[MAX_BLOCKS / 64] = { 0 };
    page_map_free(pg, map);
    uint16_t purgeable = 0;
    for (uint32_t k = 0; k < whole; k++) {
        uint32_t first = sizeclass_div(k << OS_SHIFT, pg->cls);
        uint32_t last = sizeclass_div(((k + 1) << OS_SHIFT) - 1, pg->cls);
        if (!(pg->held & (1u << k)) && map_all_set(map, first, last))
            purgeable |= (uint16_t)(1u << k);
    }
    if (!purgeable)
        return;
    /* Off the list go the blocks the purge holds, the others keep their
     * order: rebuilt in address order, a secure page's list lost its
     * random order for good (2,655 of 2,999 mallocs after a purge got the
     * block right after the previous one). Before the purge zeroes links. */
    uint16_t held = pg->held | purgeable;
    struct block *prev = NULL;
    for (struct block *b = pg->free, *next; b; b = next) {
        next = block_next(b);
        if (block_is_held(pg, sizeclass_div((uint32_t)((uint8_t *)b - page_start(pg)), pg->cls),
                          held)) {
            if (prev)
                block_set_next(prev, next);
            else
                pg->free = next;
        } else {
            prev = b;
        }
    }
    for (uint32_t k = 0; k < whole;) {
        uint32_t run = 0;
        while (k + run < whole && (purgeable & (1u << (k + run))))
            run++;
        if (run)
            os_purge(page_start(pg) + ((size_t)k << OS_SHIFT), (size_t)run << OS_SHIFT);
        k += run ? run : 1;
    }
    pg->held = held;
}

void page_purge_tail(struct page *pg)
{
    size_t reach = align_up((size_t)pg->reserved * page_block_size(pg), OS_PAGE);
    size_t end = align_up(pg->touched, OS_PAGE);
    if (end <= reach)
        return;
    os_purge(page_start(pg) + reach, end - reach);
    pg->touched = (uint32_t)reach;
}

#define PURGED_MARK 0x707572676564ULL   /* "purged", XOR-ed with the secret */
#define SEEN_MARK   0x7365656eULL       /* "seen": free at the last look */

bool page_purge_free_blocks(struct page *pg, bool at_once)
{
    uint32_t bs = page_block_size(pg);
    bool pending = false;
    for (struct block *b = pg->free; b; b = block_next(b)) {
        uintptr_t *word = (uintptr_t *)b;
        if (word[1] == (PURGED_MARK ^ block_secret))
            continue;
        if (!at_once && word[1] != (SEEN_MARK ^ block_secret)) {
            word[1] = SEEN_MARK ^ block_secret;
            pending = true;
            continue;
        }
        uintptr_t lo = align_up((uintptr_t)b + 2 * sizeof(uintptr_t), OS_PAGE);
        uintptr_t hi = ((uintptr_t)b + bs) & ~(uintptr_t)(OS_PAGE - 1);
        if (hi > lo)
            os_purge((void *)lo, hi - lo);
        word[1] = PURGED_MARK ^ block_secret;
    }
    return pending;
}

/* ---- carving ------------------------------------------------------------ */

/* Threads blocks base + order[1..n-1] (of size bs, from start) onto the
 * (empty) free list, in that order, and returns block base + order[0],
 * counted as used. No order means address order. */
static struct block *page_thread_run(struct page *pg, uint8_t *start, size_t bs, uint32_t base,
                                     const uint16_t *order, uint32_t n)
{
    struct block *head = NULL;
    for (uint32_t i = n - 1; i >= 1; i--)
        list_prepend(&head, (struct block *)(start + (base + (order ? order[i] : i)) * bs));
    pg->free = head;
    pg->used++;
    return (struct block *)(start + (base + (order ? order[0] : 0)) * bs);
}

/* Secure mode: the run's blocks are handed out in random order, so an
 * overflow cannot count on which block lies next to which. */
static COLD_TEXT NOINLINE struct block *page_extend_shuffled(struct page *pg, uint8_t *start,
                                                             size_t bs, uint32_t base, uint32_t n)
{
    uint16_t order[OS_PAGE / 16];
    for (uint32_t i = 0; i < n; i++)
        order[i] = (uint16_t)i;
    shuffle(order, n);
    return page_thread_run(pg, start, bs, base, order, n);
}

/* The blocks of the next run, from block `base`. Secure mode threads its
 * runs (in random order), so it keeps the rule that spares untouched
 * memory: the first block of an OS page nothing has touched yet goes out
 * alone, and the rest of that OS page follows on the next call, once the
 * caller has written it. Otherwise a run is the blocks that start within
 * the next FRESH_RUN bytes (at least one), handed out untouched from the
 * fresh run: 64 KiB of a medium page, and of a small page SMALL_RUN bytes
 * or SMALL_RUN_BLOCKS, whichever is more (a 4 KiB class's run is its whole
 * page). A small page's runs are a quarter of it so that the slow path
 * looks at the class's other pages between two runs (heap.c,
 * heap_carve_current): with a run of the rest of the page, a page was
 * carved whole while frees piled up in the older ones. Runs of 4 KiB did
 * no better than 16 (a FIFO of 32,768 blocks of 17-512 B: 11.3 MiB of
 * peak either way, 11.6 with whole pages) and cost 142 instructions a
 * run: carving 256 B blocks took 47 instructions a malloc against 38
 * (40 with 16 KiB).
 * Threaded runs of one OS page sent every fresh 4 KiB malloc to the slow
 * path (116 instructions, now 66; latency-touch median 19-26 ns at 1 KiB,
 * now 11-12); runs of 16 KiB took 85 instructions a fresh 4 KiB block.
 * Whatever a run covers counts as reserved: a remote free of one of its
 * blocks not yet handed out passes the shape check, as one of a block
 * already on the free list always did. */
#define FRESH_RUN PAGE_SIZE
#define SMALL_RUN ((uint32_t)PAGE_SIZE / 4)
#define SMALL_RUN_BLOCKS 16u

static uint32_t page_run_length(const struct page *pg, uint32_t bs, uint32_t base, bool secure)
{
    uint32_t left = (uint32_t)(pg->capacity - base), end;
    if (secure) {
        uint32_t os_page = (base * bs) >> OS_SHIFT;
        if (bs >= OS_PAGE || pg->touched <= (os_page << OS_SHIFT))
            return 1;
        end = (os_page + 1) << OS_SHIFT;
    } else if (pg->touched > base * bs) {
        /* Another class's data lies ahead (a page taken over): runs of one
         * OS page, so that what counts as reserved, which page_purge_tail
         * leaves alone, follows what this class hands out, and the sweep
         * gives back the rest. */
        end = ((base * bs) | (OS_PAGE - 1)) + 1;
    } else if (pg->flags & PAGE_MEDIUM) {
        end = base * bs + FRESH_RUN;
    } else {
        uint32_t run = SMALL_RUN_BLOCKS * bs;
        end = base * bs + (run > SMALL_RUN ? run : SMALL_RUN);
    }
    if (end > (uint32_t)pg->capacity * bs)
        end = (uint32_t)pg->capacity * bs;
    /* end lies past block base's start, so n >= 1. */
    uint32_t n = sizeclass_div(end - 1, pg->cls) + 1 - base;
    return n > left ? left : n;
}

HIDDEN __thread void *page_zero_block TLS_IE;

/* Hands out the next never-used block: from the fresh run, else held
 * blocks come back first, else a new run is carved and its first block
 * returned (counted as used). A block of a run carved beyond `touched`
 * becomes page_zero_block. Precondition: pg->free == NULL, and
 * page_has_room(pg). */
struct block *page_extend(struct page *pg)
{
    if (page_has_fresh(pg)) {
        struct block *b = page_take_fresh(pg);
        if (pg->flags & PAGE_ZERO_RUN)
            page_zero_block = b;
        return b;
    }
    if (pg->held)
        return page_unhold(pg);
    struct page_shape *sh = page_shape_of(pg);
    uint32_t bs = sh->block_size, base = pg->reserved;
    bool secure = init_secure();
    uint32_t n = page_run_length(pg, bs, base, secure);
    /* Atomic for other threads' reads (statistics; remote frees read the shape). */
    __atomic_store_n(&pg->reserved, (uint16_t)(base + n), __ATOMIC_RELAXED);
    __atomic_store_n(&sh->reserved, (uint16_t)(base + n), __ATOMIC_RELAXED);
    /* Beyond `touched` nothing was carved since the area was mapped or
     * last purged (MADV_DONTNEED): a run that starts there is zero. */
    bool zero = pg->touched <= base * bs && !secure;
    if ((base + n) * bs > pg->touched)
        pg->touched = (base + n) * bs;
    if (pg->flags & PAGE_MEDIUM)
        pg->flags = zero ? pg->flags | PAGE_ZERO_RUN : pg->flags & (uint16_t)~PAGE_ZERO_RUN;
    uint32_t first = (uint32_t)(sh->start - (uint8_t *)segment_of(pg)) + base * bs;
    if (unlikely(secure)) {
        /* The run goes onto the free list: no run stays open, and every
         * carved block counts as handed out (segment.h). */
        pg->fresh = pg->fresh_end = first + n * bs;
        return n > 2 ? page_extend_shuffled(pg, sh->start, bs, base, n)
                     : page_thread_run(pg, sh->start, bs, base, NULL, n);
    }
    pg->fresh = first + bs;
    pg->fresh_end = first + n * bs;
    pg->fresh_size = bs;
    pg->used++;
    struct block *b = (struct block *)(sh->start + (size_t)base * bs);
    if (zero)
        page_zero_block = b;
    return b;
}

void page_queue_push(struct page_queue *q, struct page *pg)
{
    pg->next = NULL;
    pg->prev = q->last;
    if (q->last)
        q->last->next = pg;
    else
        q->first = pg;
    q->last = pg;
}

void page_queue_push_front(struct page_queue *q, struct page *pg)
{
    pg->prev = NULL;
    pg->next = q->first;
    if (q->first)
        q->first->prev = pg;
    else
        q->last = pg;
    q->first = pg;
}

void page_queue_remove(struct page_queue *q, struct page *pg)
{
    if (pg->prev)
        pg->prev->next = pg->next;
    else
        q->first = pg->next;
    if (pg->next)
        pg->next->prev = pg->prev;
    else
        q->last = pg->prev;
    pg->next = pg->prev = NULL;
}
