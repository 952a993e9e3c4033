/*
 * usage.c - walk the live segments (under the segment lock, so none can be
 * unmapped meanwhile) and add up their pages.
 */
#include "usage.h"
#include "segment.h"
#include "large.h"
#include "os.h"

#include <string.h>

static void usage_add_segment(struct segment *s, void *arg)
{
    struct usage *u = arg;
    u->segments++;
    u->segment_bytes += SEGMENT_SIZE;
    for (uint32_t i = 0; i < s->page_count; i++) {
        const struct page *pg = &s->pages[i];
        uint32_t used = __atomic_load_n(&pg->used, __ATOMIC_RELAXED);
        if (!pg->in_use)
            continue;
        u->allocated_bytes += (uint64_t)used * pg->block_size;
        u->free_blocks += pg->reserved - used;
        u->page_bytes += page_area_size(s, pg);
    }
}

void usage_read(struct usage *u)
{
    struct os_counters os;
    memset(u, 0, sizeof *u);
    segment_foreach(usage_add_segment, u);
    large_counters(&u->large_count, &u->large_bytes);
    os_counters_read(&os);
    u->mapped_bytes = os.mapped_bytes;
    u->purged_bytes = os.purged_bytes;
    u->maps = os.maps;
    u->unmaps = os.unmaps;
    u->remaps = os.remaps;
    u->purges = os.purges;
}
