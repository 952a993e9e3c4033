/*
 * large_maps.h - where a large mapping is cut into kernel mappings (VMAs).
 *
 * The large cache glues freed mappings by moving their pages side by side
 * (large.c), and the kernel never merges the moved pieces again: each keeps
 * the page offset of where it came from. Unbounded, 1,000 live blocks of
 * 0.6-8 MiB came to 3,600 kernel mappings, where glibc, jemalloc, mimalloc
 * and tcmalloc stay near none, against a limit of 65,530 per process
 * (vm.max_map_count), and nothing bounded a block's count but the 16
 * cache slots and how often it was moved. So every large mapping carries
 * its cuts: the page offsets at which a new kernel mapping starts. They
 * are exact (splitting a mapping hands each side the cuts that fall in
 * it; checked against /proc/self/maps over 13,000 blocks), so gluing is
 * held to LARGE_MAX_MAPS per block, and realloc grows a glued block's
 * last mapping in place instead of moving every piece.
 */
#ifndef TALLY_LARGE_MAPS_H
#define TALLY_LARGE_MAPS_H

#include "internal.h"

/* The most kernel mappings one large block may span. Unbounded, the
 * 8-live-block malloc-large loop and a 300-block one had blocks of up to
 * 18 and 19 (means 5.1 and 3.7); a bound of 16 left malloc-large's time
 * as it was (0.145 s against 0.156, 7 alternating runs), 12 cost it 10%
 * and 7 cost 50%, since gluing is what saves it its faults. */
#define LARGE_MAX_MAPS 16

struct large_maps {
    uint32_t n;                          /* cuts; the mapping spans n + 1 */
    uint32_t cut[LARGE_MAX_MAPS - 1];    /* in OS pages from the start, ascending */
};

/* Appends src, a mapping placed `at` bytes into m's, and a cut where it
 * starts (none at 0). Precondition: the result fits. */
static inline void large_maps_append(struct large_maps *m, const struct large_maps *src,
                                     size_t at)
{
    uint32_t base = (uint32_t)(at / OS_PAGE);
    if (base)
        m->cut[m->n++] = base;
    for (uint32_t i = 0; i < src->n; i++)
        m->cut[m->n++] = base + src->cut[i];
}

/* Splits m at `at` bytes (page aligned): m keeps the cuts before it, tail
 * gets those after it, counted from `at`. */
static inline void large_maps_split(struct large_maps *m, size_t at, struct large_maps *tail)
{
    tail->n = 0;
    if (at / OS_PAGE > UINT32_MAX)
        return;   /* past every cut (cuts are 32-bit page counts) */
    uint32_t page = (uint32_t)(at / OS_PAGE), keep = 0;
    for (uint32_t i = 0; i < m->n; i++) {
        if (m->cut[i] < page)
            keep++;
        else if (m->cut[i] > page)
            tail->cut[tail->n++] = m->cut[i] - page;
    }
    m->n = keep;
}

/* The byte offset of the last kernel mapping m spans. */
static inline size_t large_maps_last(const struct large_maps *m)
{
    return m->n ? (size_t)m->cut[m->n - 1] * OS_PAGE : 0;
}

#endif
