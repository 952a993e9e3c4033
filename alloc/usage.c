/*
 * usage.c - walk the live segments (under the segment lock, so none can be
 * unmapped meanwhile) and add up their pages.
 */
#include "usage.h"
#include "segment.h"
#include "large.h"
#include "large_cache.h"
#include "span.h"
#include "os.h"

#include <string.h>

struct usage_walk { struct usage *u; bool with_resident; };

static void usage_add_segment(struct segment *s, void *arg)
{
    struct usage_walk *w = arg;
    struct usage *u = w->u;
    if (w->with_resident)
        u->resident_bytes += os_resident(s, SEGMENT_SIZE);
    u->segments++;
    u->segment_bytes += SEGMENT_SIZE;
    for (uint32_t i = 0; i < s->page_count; i++) {
        const struct page *pg = &s->pages[i];
        const struct page_shape *sh = &s->shapes[i];
        uint32_t used = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
        /* Read once, and a page released meanwhile (its shape zeroed)
         * skipped: a block size read as 0 after in_use read as 1 once
         * divided the class's slots by zero (SIGFPE in the TSan driver's
         * mallinfo2 thread; the slots are now the page's capacity). */
        uint32_t bs = __atomic_load_n(&sh->block_size, __ATOMIC_RELAXED);
        if (!sh->in_use || bs == 0)
            continue;
        u->allocated_bytes += (uint64_t)used * bs;
        uint16_t reserved = __atomic_load_n(&pg->reserved, __ATOMIC_RELAXED);
        if (reserved > used)    /* read apart: the page may change between */
            u->free_blocks += reserved - used;
        u->page_bytes += page_area_size(s, pg);
        u->class_blocks[pg->cls] += used;
        u->class_pages[pg->cls]++;
        u->class_slots[pg->cls] += pg->capacity;
    }
}

void usage_read(struct usage *u, bool with_resident)
{
    memset(u, 0, sizeof *u);
    struct usage_walk w = { u, with_resident };
    segment_foreach(usage_add_segment, &w);
    large_counters(&u->large_count, &u->large_bytes);
    u->cached_bytes = span_cached_bytes() + large_cache_bytes();
    u->resident_bytes += u->large_bytes + u->cached_bytes;
    os_counters_read(&u->os);
}
