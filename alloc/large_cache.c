/*
 * large_cache.c - the warm cache of freed large mappings (see the header).
 *
 * One small array under one lock: large allocations are rare next to small
 * ones and already cost a system call, so a lock here is noise.
 */
#include "large_cache.h"
#include "large.h"
#include "os.h"
#include "init.h"
#include "lock.h"
#include "background.h"

#include <pthread.h>

struct cache_entry { void *base; size_t size; uint64_t freed_at; struct large_maps maps; };

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static TABLE_BSS struct cache_entry slots[LARGE_CACHE_SLOTS];   /* oldest first */
static unsigned count;
static size_t bytes;         /* in the entries; atomic stores under the lock */
/* The cache keeps blocks only once the program has shown it reuses them:
 * a large request that came after a large free arms it (glibc's moving
 * mmap threshold reads the same sign), and so does a second large free.
 * Until then a freed block goes back at once, so a one-off buffer
 * (qsort's temporary, a file read whole) does not stay resident beside
 * everything the program touches after it. A batch of buffers freed
 * together (a server's round of requests) is kept from its second block
 * on: armed by requests only, the whole first batch was unmapped and the
 * next round faulted it in again (bufcycle: 15,900 faults in the second
 * round against 16,600 in the first; tcmalloc 350). A cache emptied by age
 * or malloc_trim disarms again. */
static struct large_arming arming;
/* The most bytes live large blocks have held since the cache last
 * emptied (large_cache_fit_live), under the lock. */
static size_t peak_live;

bool large_arming_free(struct large_arming *a)
{
    if (!__atomic_load_n(&a->armed, __ATOMIC_RELAXED) &&
        __atomic_exchange_n(&a->freed_one, true, __ATOMIC_RELAXED))
        __atomic_store_n(&a->armed, true, __ATOMIC_RELAXED);     /* a second free */
    return __atomic_load_n(&a->armed, __ATOMIC_RELAXED);
}

void large_arming_request(struct large_arming *a)
{
    if (!__atomic_load_n(&a->armed, __ATOMIC_RELAXED) &&
        __atomic_load_n(&a->freed_one, __ATOMIC_RELAXED))
        __atomic_store_n(&a->armed, true, __ATOMIC_RELAXED);
}

HOT_TEXT void large_arming_reset(struct large_arming *a)
{
    __atomic_store_n(&a->armed, false, __ATOMIC_RELAXED);
    __atomic_store_n(&a->freed_one, false, __ATOMIC_RELAXED);
}

static struct cache_entry cache_remove(unsigned i)
{
    struct cache_entry e = slots[i];
    for (unsigned k = i + 1; k < count; k++)
        slots[k - 1] = slots[k];
    __atomic_store_n(&count, count - 1, __ATOMIC_RELAXED);
    __atomic_store_n(&bytes, bytes - e.size, __ATOMIC_RELAXED);   /* read by the stats */
    return e;
}

/* The range of entry i, removed: what an eviction unmaps once the lock
 * is given back. */
static struct os_range cache_remove_range(unsigned i)
{
    struct cache_entry e = cache_remove(i);
    return (struct os_range){ e.base, e.size };
}

/* Entry i, removed, as the piece a request takes. */
static struct large_piece cache_remove_piece(unsigned i)
{
    struct cache_entry e = cache_remove(i);
    return (struct large_piece){ e.base, e.size, e.maps };
}

/* The peak rule (large_cache.h), broken once `adding` more bytes are
 * cached while `live` are live. Called with the lock held. */
static bool over_peak(size_t adding, size_t live)
{
    return bytes + adding + live > peak_live;
}

/* What an eviction or expiry removed under the lock, unmapped after it. */
static void unmap_ranges(const struct os_range *r, unsigned n)
{
    for (unsigned i = 0; i < n; i++)
        os_unmap(r[i].p, r[i].size);
}

/* Whether hi starts where lo ends and the two can be one entry: at most
 * LARGE_MAX_MAPS kernel mappings (the boundary counts as a cut: after a
 * move the kernel keeps the two apart), at most the whole cache (the
 * most large_cache_put keeps of one block), and cuts that fit their
 * 32-bit page counts. */
static bool cache_joinable(const struct cache_entry *lo, const struct cache_entry *hi,
                           size_t limit)
{
    size_t sum = lo->size + hi->size;
    return (char *)lo->base + lo->size == (char *)hi->base &&
           lo->maps.n + 1 + hi->maps.n <= LARGE_MAX_MAPS - 1 && sum <= limit &&
           sum / OS_PAGE <= UINT32_MAX;
}

/* lo becomes lo and hi as one entry (cache_joinable). */
static void cache_join(struct cache_entry *lo, const struct cache_entry *hi)
{
    large_maps_append(&lo->maps, &hi->maps, lo->size);
    lo->size += hi->size;
}

/* Joins the freed range e with the cached entries right before and right
 * after it in the address space, so that a request bigger than either is
 * served in place. A split leaves its tail cached next to the block it
 * cut off; once that block is freed too, the two were glued by moving
 * every page into a fresh mapping, and under shadow paging (a PVM guest)
 * each moved page faults again, hidden from the guest, on its next touch
 * (3.9 us a page against 10 us for a fresh one, and ~0 under nested
 * paging). Called with the lock held. */
static void cache_join_neighbours(struct cache_entry *e, size_t limit)
{
    for (unsigned i = 0; i < count; i++)
        if (cache_joinable(&slots[i], e, limit)) {
            struct cache_entry before = cache_remove(i);
            cache_join(&before, e);
            *e = before;
            break;
        }
    for (unsigned i = 0; i < count; i++)
        if (cache_joinable(e, &slots[i], limit)) {
            struct cache_entry after = cache_remove(i);
            cache_join(e, &after);
            break;
        }
}

void large_cache_put(void *base, size_t size, const struct large_maps *m, bool was_live)
{
    size_t limit = init_large_cache_bytes();
    if (!large_arming_free(&arming) || size > limit) {
        os_unmap(base, size);
        return;
    }
    /* At most every entry; the cap below a segment adds one only when
     * LARGE_CACHE_SMALL_SLOTS small entries are left, so the total never
     * passes the slot count. */
    struct os_range evicted[LARGE_CACHE_SLOTS];   /* 2 KiB: not whole entries */
    unsigned n_evicted = 0;
    struct cache_entry e = { base, size, 0, *m };
    lock_take(&cache_lock);
    /* A freed block was live a moment ago: live + size is a level
     * reached. (A split's tail was cached, not live.) */
    size_t live = large_mapped_live();
    if (was_live && live + size > peak_live)
        peak_live = live + size;
    cache_join_neighbours(&e, limit);
    while (count && (count == LARGE_CACHE_SLOTS || bytes + e.size > limit ||
                     over_peak(e.size, live)))
        evicted[n_evicted++] = cache_remove_range(0);
    if (e.size < SEGMENT_SIZE) {
        /* The oldest of the entries below a segment, when they are many. */
        unsigned small = 0, oldest = 0;
        for (unsigned i = 0; i < count; i++)
            if (slots[i].size < SEGMENT_SIZE && small++ == 0)
                oldest = i;
        if (small >= LARGE_CACHE_SMALL_SLOTS)
            evicted[n_evicted++] = cache_remove_range(oldest);
    }
    e.freed_at = os_now_ms();
    slots[count] = e;
    __atomic_store_n(&count, count + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&bytes, bytes + e.size, __ATOMIC_RELAXED);
    lock_give(&cache_lock);
    unmap_ranges(evicted, n_evicted);
    background_poke();          /* it expires the entry if nobody else does */
}

/* The entry that covers `need` most closely, else the largest, of those
 * that leave at most `cuts` cuts, counting the one at its start (`join`)
 * and the one before what it leaves uncovered, and are not below a
 * segment and over twice `need`; -1 when there is none.
 * Called with the lock held. */
static int cache_pick(size_t need, unsigned cuts, bool join)
{
    int best = -1;
    for (unsigned i = 0; i < count; i++) {
        if (join + slots[i].maps.n + (slots[i].size < need) > cuts)
            continue;
        /* Below a segment an entry cannot be split: more than twice the
         * need, its resident pages would sit unused in the block. Left
         * for a better fit (or the peak rule's eviction), bufcycle's
         * peak went from 88.5 to 75.8 MiB at about the same speed. */
        if (slots[i].size < SEGMENT_SIZE && slots[i].size / 2 > need)
            continue;
        if (best < 0) {
            best = (int)i;
            continue;
        }
        bool fits = slots[i].size >= need, best_fits = slots[best].size >= need;
        if (fits != best_fits ? fits
                              : (fits ? slots[i].size < slots[best].size
                                      : slots[i].size > slots[best].size))
            best = (int)i;
    }
    return best;
}

unsigned large_cache_take(size_t size, struct large_piece out[LARGE_MAX_MAPS])
{
    unsigned n = 0, cuts = 0;
    size_t got = 0;
    if (!__atomic_load_n(&arming.armed, __ATOMIC_RELAXED)) {
        large_arming_request(&arming);
        return 0;
    }
    lock_take(&cache_lock);
    /* Each piece after the first adds a cut, so at most LARGE_MAX_MAPS. */
    while (got < size && n < LARGE_MAX_MAPS) {
        int i = cache_pick(size - got, LARGE_MAX_MAPS - 1 - cuts, n > 0);
        if (i < 0)
            break;
        out[n] = cache_remove_piece((unsigned)i);
        cuts += (n > 0) + out[n].maps.n;
        got += out[n++].size;
    }
    lock_give(&cache_lock);
    return n;
}

/* The end of a single take: entry i (none when negative) removed into
 * *out, and the lock the caller took given back. Whether there was one. */
static bool cache_hand_out(int i, struct large_piece *out)
{
    if (i >= 0)
        *out = cache_remove_piece((unsigned)i);
    lock_give(&cache_lock);
    return i >= 0;
}

bool large_cache_take_covering(size_t size, unsigned cuts, struct large_piece *out)
{
    if (!__atomic_load_n(&count, __ATOMIC_RELAXED))
        return false;
    lock_take(&cache_lock);
    int i = cache_pick(size, cuts, false);
    return cache_hand_out(i >= 0 && slots[i].size >= size ? i : -1, out);
}

bool large_cache_take_at(const void *base, struct large_piece *out)
{
    if (!__atomic_load_n(&count, __ATOMIC_RELAXED))
        return false;
    lock_take(&cache_lock);
    int at = -1;
    for (unsigned i = 0; i < count && at < 0; i++)
        if (slots[i].base == base)
            at = (int)i;
    return cache_hand_out(at, out);
}

bool large_cache_holds(void)
{
    return __atomic_load_n(&count, __ATOMIC_RELAXED) != 0;
}

void large_cache_fit_live(void)
{
    if (!__atomic_load_n(&count, __ATOMIC_RELAXED))
        return;
    struct os_range evicted[LARGE_CACHE_SLOTS];
    unsigned n = 0;
    lock_take(&cache_lock);
    size_t live = large_mapped_live();
    if (live > peak_live)
        peak_live = live;
    while (count && over_peak(0, live))
        evicted[n++] = cache_remove_range(0);
    lock_give(&cache_lock);
    unmap_ranges(evicted, n);
}

HOT_TEXT bool large_cache_expire(bool all)
{
    if (!__atomic_load_n(&count, __ATOMIC_RELAXED)) {
        if (all)
            large_arming_reset(&arming);
        return false;
    }
    uint64_t now = os_now_ms();
    struct os_range expired[LARGE_CACHE_SLOTS];
    unsigned n = 0;
    if (all)
        lock_take(&cache_lock);
    else if (!lock_try(&cache_lock))
        return false;
    while (count && (all || large_expired(now, slots[0].freed_at, bytes)))
        expired[n++] = cache_remove_range(0);
    if (!count) {
        peak_live = 0;       /* the next peak is measured afresh */
        large_arming_reset(&arming);
    }
    lock_give(&cache_lock);
    unmap_ranges(expired, n);
    return n > 0;
}

size_t large_cache_bytes(void)
{
    return __atomic_load_n(&bytes, __ATOMIC_RELAXED);
}

HOT_TEXT void large_cache_fork_prepare(void) { pthread_mutex_lock(&cache_lock); }
HOT_TEXT void large_cache_fork_parent(void) { pthread_mutex_unlock(&cache_lock); }
HOT_TEXT void large_cache_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    cache_lock = fresh;
}
