/*
 * segment.c - segments: getting them from the OS (through a small cache of
 * empty ones), handing out their pages, and the segmap.
 *
 * Only segment_alloc/segment_free and the stats walk take segment_lock; page
 * hand-out within a segment is the owning heap's business and lock-free.
 * A freed segment keeps its mapping in the cache (pages already purged by
 * the heap, so it costs only its header in RSS) and is unmapped beyond
 * SEGMENT_CACHE_MAX, so a thread that comes and goes does not pay mmap each
 * time but an idle process does not hoard address space.
 */
#include "segment.h"
#include "os.h"
#include "init.h"
#include "lock.h"
#include "diag.h"

#include <pthread.h>
#include <string.h>
#include <sys/auxv.h>

#define SEGMENT_CACHE_MAX 8
/* New segments are carved from reservations, each mapped with one call:
 * address space only (MAP_NORESERVE, untouched until used), 4 segments the
 * first time and twice as many each time after, up to SEGMENT_RESERVE_MAX,
 * so a growing heap maps ever more rarely. A new medium segment serves 7
 * blocks of 500 KB; with an mmap of its own each, the calls that opened
 * one made latency-touch's p99 at that size (about 15 us against
 * tcmalloc's 6). Each reservation is asked for just below the last (the
 * kernel hands out addresses downwards), which keeps it aligned without
 * over-mapping and trimming. */
#define SEGMENT_RESERVE_FIRST 4
#define SEGMENT_RESERVE_MAX   64

static uint16_t segmap_none[1];
HIDDEN uint16_t *segmap = segmap_none;
HIDDEN uintptr_t segmap_mask;
HIDDEN uintptr_t block_secret;

/* Called first thing at start-up, before any free list exists. The kernel
 * hands every process 16 random bytes (AT_RANDOM); no syscall, no malloc. */
void segment_init_secret(void)
{
    const unsigned char *r = (const unsigned char *)getauxval(AT_RANDOM);
    uintptr_t s = (uintptr_t)&s * 0x9e3779b97f4a7c15ULL;
    for (int i = 0; r && i < 16; i++)
        s = (s ^ r[i]) * 0x100000001b3ULL;
    block_secret = s | 1;     /* never 0: NULL must not encode to NULL */
}

static pthread_mutex_t segment_lock = PTHREAD_MUTEX_INITIALIZER;
static struct segment *all_segments;         /* live, under segment_lock */
static struct segment *cache[SEGMENT_CACHE_MAX];
static unsigned cache_count;
static char *reserve_next;                   /* the reservation's unused rest */
static unsigned reserve_left;
static char *reserve_base;                   /* the last reservation's start */
static unsigned reserve_count = SEGMENT_RESERVE_FIRST;

/* A never-used segment: the next of the reservation, else one of a new
 * reservation, else (address space short) one mapped alone. Precondition:
 * segment_lock held. */
static struct segment *segment_map_fresh(void)
{
    if (!reserve_left) {
        size_t size = (size_t)reserve_count * SEGMENT_SIZE;
        char *hint = reserve_base && (uintptr_t)reserve_base > size ? reserve_base - size : NULL;
        char *r = os_reserve_aligned_at(hint, size, SEGMENT_SIZE);
        if (!r) {
            reserve_count = SEGMENT_RESERVE_FIRST;   /* short of address space: ask less */
            return os_reserve_aligned_at(NULL, SEGMENT_SIZE, SEGMENT_SIZE);
        }
        reserve_base = reserve_next = r;
        reserve_left = reserve_count;
        if (reserve_count < SEGMENT_RESERVE_MAX)
            reserve_count *= 2;
    }
    struct segment *s = (struct segment *)reserve_next;
    reserve_next += SEGMENT_SIZE;
    reserve_left--;
    return s;
}

void segmap_init(void)
{
    uint16_t *map = os_map_table((size_t)sizeof *segmap << SEGMAP_BITS);
    if (!map)
        diag_fail("malloc", "cannot map the segment map (64 MiB of address space)", NULL);
    __atomic_store_n(&segmap, map, __ATOMIC_RELAXED);
    __atomic_store_n(&segmap_mask, SEGMAP_MASK, __ATOMIC_RELEASE);
}

void segmap_set_range(const void *p, size_t size, uint16_t first, uint16_t rest)
{
    uintptr_t i = ((uintptr_t)p >> SEGMENT_SHIFT) & SEGMAP_MASK;
    uintptr_t n = (size + SEGMENT_SIZE - 1) >> SEGMENT_SHIFT;
    __atomic_store_n(&segmap[i], first, __ATOMIC_RELEASE);
    for (uintptr_t k = 1; k < n; k++)
        __atomic_store_n(&segmap[(i + k) & SEGMAP_MASK], rest, __ATOMIC_RELEASE);
}

/* Secure mode: the segment's last OS page becomes a guard, so running off
 * the end of the last page faults instead of reaching the next mapping. */
static void segment_set_guard(struct segment *s, bool was, bool guard)
{
    if (was != guard)
        os_protect((char *)s + SEGMENT_SIZE - OS_PAGE, OS_PAGE, guard);
}

/* `fresh`: s comes straight from mmap, so its header is zero already. It
 * is only written, never read first: writing zeros would fault in header
 * pages nothing else needs yet, and a read before the first write costs a
 * second fault (the zero page, then the copy). */
static void segment_init_header(struct segment *s, struct heap *h, enum segment_kind kind,
                                bool fresh)
{
    bool guard = init_secure();
    segment_set_guard(s, fresh ? false : s->guarded, guard);
    if (!fresh)
        memset(s, 0, sizeof *s);
    s->guarded = guard;
    s->heap = h;
    s->kind = kind;
    if (kind == SEG_SMALL) {
        s->page_shift = PAGE_SHIFT;
        s->page_count = PAGES_PER_SEGMENT;
        s->free_pages = ~(uint64_t)0;
    } else {
        s->page_shift = MEDIUM_PAGE_SHIFT;
        s->page_count = MEDIUM_PAGES_PER_SEGMENT;
        s->free_pages = ((uint64_t)1 << MEDIUM_PAGES_PER_SEGMENT) - 1;
    }
}

/* A cached segment, else a fresh one (*fresh); NULL when the OS refuses. */
static struct segment *segment_take(bool *fresh)
{
    lock_take(&segment_lock);
    *fresh = !cache_count;
    struct segment *s = cache_count ? cache[--cache_count] : segment_map_fresh();
    lock_give(&segment_lock);
    return s;
}

/* Caches s, or unmaps it when the cache is full; the caller holds the
 * lock, which it gives back before the unmap (*unmap says to). */
static void segment_cache_locked(struct segment *s, bool *unmap)
{
    *unmap = cache_count == SEGMENT_CACHE_MAX;
    if (!*unmap)
        cache[cache_count++] = s;
}

struct segment *segment_alloc(struct heap *h, uint16_t tag, enum segment_kind kind)
{
    bool fresh;
    struct segment *s = segment_take(&fresh);
    if (!s)
        return NULL;
    segment_init_header(s, h, kind, fresh);

    lock_take(&segment_lock);
    s->all_next = all_segments;
    if (all_segments)
        all_segments->all_prev = s;
    all_segments = s;
    lock_give(&segment_lock);
    segmap_set_range(s, SEGMENT_SIZE, tag, tag);
    return s;
}

void segment_rekind(struct segment *s, enum segment_kind kind)
{
    /* Under the lock: a segment freed or allocated beside it writes its
     * all_* links, and the statistics walk reads its header. */
    lock_take(&segment_lock);
    struct segment *next = s->next, *prev = s->prev, *all_next = s->all_next,
                   *all_prev = s->all_prev;
    segment_init_header(s, s->heap, kind, false);
    s->next = next;
    s->prev = prev;
    s->all_next = all_next;
    s->all_prev = all_prev;
    lock_give(&segment_lock);
}

/* Precondition: no page of s is in use, and every page area was purged. */
void segment_free(struct segment *s)
{
    os_purge_flush();   /* purges still gathered (os.h) land before s moves on */
    segmap_set_range(s, SEGMENT_SIZE, TAG_NONE, TAG_NONE);
    bool unmap;
    lock_take(&segment_lock);
    if (s->all_prev)
        s->all_prev->all_next = s->all_next;
    else
        all_segments = s->all_next;
    if (s->all_next)
        s->all_next->all_prev = s->all_prev;
    segment_cache_locked(s, &unmap);
    lock_give(&segment_lock);
    if (unmap)
        os_unmap(s, SEGMENT_SIZE);
}

void *segment_take_bare(bool *fresh)
{
    struct segment *s = segment_take(fresh);
    if (s && !*fresh)
        segment_set_guard(s, s->guarded, false);
    return s;
}

void segment_give_bare(void *p)
{
    struct segment *s = p;
    s->guarded = false;         /* what segment_alloc reads of a cached header */
    bool unmap;
    lock_take(&segment_lock);
    segment_cache_locked(s, &unmap);
    lock_give(&segment_lock);
    if (unmap)
        os_unmap(s, SEGMENT_SIZE);
}

/* Unmaps every cached segment and the reservation's rest (malloc_trim). */
void segment_cache_release(void)
{
    struct segment *batch[SEGMENT_CACHE_MAX];
    lock_take(&segment_lock);
    unsigned n = cache_count;
    memcpy(batch, cache, n * sizeof batch[0]);
    cache_count = 0;
    char *rest = reserve_next;
    size_t rest_size = (size_t)reserve_left * SEGMENT_SIZE;
    reserve_left = 0;
    lock_give(&segment_lock);
    for (unsigned i = 0; i < n; i++)
        os_unmap(batch[i], SEGMENT_SIZE);
    if (rest_size)
        os_unmap(rest, rest_size);
}

struct page *segment_take_page_at(struct segment *s, unsigned i)
{
    s->free_pages &= ~((uint64_t)1 << i);
    s->pages_in_use++;
    s->pages[i].index = (uint16_t)i;   /* written here, not at mapping (see the header) */
    return &s->pages[i];
}

/* Returns an unassigned page of s, or NULL when all are taken. */
struct page *segment_take_page(struct segment *s)
{
    if (!s->free_pages)
        return NULL;
    return segment_take_page_at(s, (unsigned)__builtin_ctzll(s->free_pages));
}

/* Precondition: pg's area has been purged (or was never touched). */
void segment_release_page(struct segment *s, struct page *pg)
{
    uint16_t index = pg->index;
    memset(page_shape_of(pg), 0, sizeof(struct page_shape));
    memset(pg, 0, sizeof *pg);
    pg->index = index;
    s->free_pages |= (uint64_t)1 << index;
    s->pages_in_use--;
}

void segment_foreach(void (*fn)(struct segment *, void *), void *arg)
{
    lock_take(&segment_lock);
    for (struct segment *s = all_segments; s; s = s->all_next)
        fn(s, arg);
    lock_give(&segment_lock);
}

void segment_lock_all(void)   { pthread_mutex_lock(&segment_lock); }
void segment_unlock_all(void) { pthread_mutex_unlock(&segment_lock); }
void segment_reset_locks(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    segment_lock = fresh;
}
