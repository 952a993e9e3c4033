/*
 * page.c - page set-up for a class, lazy carving, page queues.
 */
#include "page.h"
#include "sizeclass.h"
#include "init.h"

void page_init(struct segment *s, struct page *pg, unsigned cls)
{
    size_t area = page_area_size(s, pg);
    uint8_t *base = (uint8_t *)s + (s->kind == SEG_MEDIUM ? MEDIUM_HEADER
                                    : (pg->index == 0 ? SMALL_HEADER
                                       : (size_t)pg->index * PAGE_SIZE));
    pg->cls = (uint8_t)cls;
    pg->block_size = sizeclass_block_size[cls];
    pg->capacity = (uint32_t)(area / pg->block_size);
    pg->reserved = 0;
    pg->used = 0;
    pg->free = NULL;
    pg->flags = 0;
    pg->start = base;
    pg->next = pg->prev = NULL;
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

/* Secure mode: the run's blocks are handed out in random order, so an
 * overflow cannot count on which block lies next to which. */
static NOINLINE struct block *page_extend_shuffled(struct page *pg, uint8_t *first, uint32_t n)
{
    uint16_t order[OS_PAGE / 16];
    for (uint32_t i = 0; i < n; i++)
        order[i] = (uint16_t)i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = page_random() % (i + 1);
        uint16_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    struct block *head = NULL;
    for (uint32_t i = n - 1; i >= 1; i--) {
        struct block *b = (struct block *)(first + (size_t)order[i] * pg->block_size);
        block_set_next(b, head);
        head = b;
    }
    pg->free = head;
    pg->used++;
    return (struct block *)(first + (size_t)order[0] * pg->block_size);
}

/* Carves the next run of never-used blocks: returns the first (counted as
 * used) and threads the rest, up to an OS page's worth, onto the free list.
 * Precondition: pg->free == NULL and reserved < capacity. */
struct block *page_extend(struct page *pg)
{
    size_t bs = pg->block_size;
    uint32_t n = (uint32_t)(OS_PAGE / bs);
    if (n == 0)
        n = 1;
    if (n > pg->capacity - pg->reserved)
        n = pg->capacity - pg->reserved;
    uint8_t *first = pg->start + (size_t)pg->reserved * bs;
    pg->reserved += n;
    if (unlikely(init_secure()) && n > 2)
        return page_extend_shuffled(pg, first, n);
    struct block *head = NULL;
    for (uint32_t i = n - 1; i >= 1; i--) {
        struct block *b = (struct block *)(first + i * bs);
        block_set_next(b, head);
        head = b;
    }
    pg->free = head;
    pg->used++;
    return (struct block *)first;
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
