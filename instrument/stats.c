/*
 * stats.c - tally_stats_get() and tally_stats_print(): a snapshot derived
 * from segment, page and mapping state (alloc/usage), as a human table or
 * JSON, written with write(2) from stack buffers; and glibc's
 * malloc_stats() and malloc_info() over the same snapshot.
 */
#include "report.h"
#include "options.h"
#include "../alloc/usage.h"
#include "../include/tally.h"

#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static void stats_fill(struct tally_stats *s, const struct usage *u)
{
    s->version = TALLY_STATS_VERSION;
    s->allocated_bytes = u->allocated_bytes + u->large_bytes;
    s->active_bytes = u->page_bytes + u->large_bytes;
    s->mapped_bytes = u->os.mapped_bytes;
    s->resident_bytes = u->resident_bytes;
    s->cached_bytes = u->cached_bytes;
    s->large_count = u->large_count;
    s->large_bytes = u->large_bytes;
    s->segments = u->segments;
    s->purged_bytes = u->os.purged_bytes;
    s->mmap_calls = u->os.calls[OS_MMAP];
    s->munmap_calls = u->os.calls[OS_MUNMAP];
    s->mremap_calls = u->os.calls[OS_MREMAP];
    s->madvise_calls = u->os.calls[OS_MADVISE];
}

EXPORT int tally_stats_get(struct tally_stats *out)
{
    if (!out || out->size < offsetof(struct tally_stats, allocated_bytes)) {
        errno = EINVAL;
        return -1;
    }
    struct usage u;
    usage_read(&u, out->size >= offsetof(struct tally_stats, resident_bytes) + 8);
    struct tally_stats s = { .size = out->size };
    stats_fill(&s, &u);
    memcpy(out, &s, out->size < sizeof s ? out->size : sizeof s);
    return 0;
}

struct stat_field { const char *name; uint64_t value; };

/* One row per size class in use: the strings around its numbers. The
 * slots (blocks the class's pages hold when full) against the blocks in
 * use say how full its pages are, jemalloc's `util` per bin: what the
 * class keeps resident beyond what is allocated. The text form gives that
 * fill in percent as well. */
struct class_rows { const char *first, *next, *blocks, *pages, *slots, *fill, *end; };

static const struct class_rows text_rows = { "  ", "  ", "\t    ", "\t    ", "\t    ",
                                             "\t    ", "%\n" };
static const struct class_rows json_rows = { "{\"size\": ", ", {\"size\": ", ", \"blocks\": ",
                                             ", \"pages\": ", ", \"slots\": ", NULL, "}" };

static void print_classes(struct diag_buf *b, int fd, const struct usage *u,
                          const struct class_rows *r)
{
    bool first = true;
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
        if (!u->class_pages[c])
            continue;
        diag_str(b, first ? r->first : r->next);
        first = false;
        diag_dec(b, sizeclass_block_size[c]);
        diag_str(b, r->blocks);
        diag_dec(b, u->class_blocks[c]);
        diag_str(b, r->pages);
        diag_dec(b, u->class_pages[c]);
        diag_str(b, r->slots);
        diag_dec(b, u->class_slots[c]);
        if (r->fill) {
            diag_str(b, r->fill);
            diag_dec(b, u->class_slots[c] ? 100 * u->class_blocks[c] / u->class_slots[c] : 0);
        }
        diag_str(b, r->end);
        report_maybe_flush(b, fd);
    }
}

static void print_text(struct diag_buf *b, int fd, const struct stat_field *f, size_t n,
                       const struct usage *u)
{
    diag_str(b, "tally: statistics\n");
    for (size_t i = 0; i < n; i++) {
        diag_str(b, "  ");
        diag_str(b, f[i].name);
        for (size_t pad = strlen(f[i].name); pad < 18; pad++)
            diag_str(b, " ");
        diag_dec(b, f[i].value);
        diag_str(b, "\n");
    }
    diag_str(b, "  class       blocks in use    pages    slots    fill\n");
    print_classes(b, fd, u, &text_rows);
}

static void print_json(struct diag_buf *b, int fd, const struct stat_field *f, size_t n,
                       const struct usage *u)
{
    diag_str(b, "{");
    for (size_t i = 0; i < n; i++) {
        diag_str(b, i ? ", \"" : "\"");
        diag_str(b, f[i].name);
        diag_str(b, "\": ");
        diag_dec(b, f[i].value);
    }
    diag_str(b, ", \"classes\": [");
    print_classes(b, fd, u, &json_rows);
    diag_str(b, "]}\n");
}

EXPORT int tally_stats_print(int fd, int format)
{
    if (format != TALLY_STATS_TEXT && format != TALLY_STATS_JSON) {
        errno = EINVAL;
        return -1;
    }
    struct usage u;
    usage_read(&u, true);
    struct tally_stats s = { .size = sizeof s };
    stats_fill(&s, &u);
    const struct stat_field fields[] = {
        { "allocated_bytes", s.allocated_bytes }, { "active_bytes", s.active_bytes },
        { "resident_bytes", s.resident_bytes },   { "mapped_bytes", s.mapped_bytes },
        { "large_count", s.large_count },         { "large_bytes", s.large_bytes },
        { "segments", s.segments },               { "purged_bytes", s.purged_bytes },
        { "mmap_calls", s.mmap_calls },           { "munmap_calls", s.munmap_calls },
        { "mremap_calls", s.mremap_calls },       { "madvise_calls", s.madvise_calls },
        { "cached_bytes", s.cached_bytes },
    };
    size_t n = sizeof fields / sizeof fields[0];
    int out = fd >= 0 ? fd : report_open();
    struct diag_buf b = { .len = 0 };
    if (format == TALLY_STATS_JSON)
        print_json(&b, out, fields, n, &u);
    else
        print_text(&b, out, fields, n, &u);
    diag_flush(&b, out);
    if (fd < 0)
        report_close(out);
    return 0;
}

/* glibc's two printers, so that a program calling them under tally gets
 * tally's figures rather than those of glibc's arenas, which it no longer
 * uses. malloc_stats() writes to stderr, as glibc's does. */
EXPORT void malloc_stats(void)
{
    tally_stats_print(STDERR_FILENO, TALLY_STATS_TEXT);
}

/* glibc's XML shape where it has a counterpart (mmap'd blocks, the memory
 * taken from the system), and one element with tally's own fields. Stdio
 * is the caller's choice here (it hands in the FILE), never on a hot path. */
EXPORT int malloc_info(int options, FILE *fp)
{
    if (options != 0)
        return EINVAL;
    struct tally_stats s = { .size = sizeof s };
    tally_stats_get(&s);
    fprintf(fp, "<malloc version=\"1\">\n"
            "<tally allocated=\"%llu\" active=\"%llu\" resident=\"%llu\" "
            "mapped=\"%llu\" segments=\"%llu\" purged=\"%llu\"/>\n"
            "<total type=\"mmap\" count=\"%llu\" size=\"%llu\"/>\n"
            "<system type=\"current\" size=\"%llu\"/>\n"
            "<aspace type=\"total\" size=\"%llu\"/>\n"
            "</malloc>\n",
            (unsigned long long)s.allocated_bytes, (unsigned long long)s.active_bytes,
            (unsigned long long)s.resident_bytes, (unsigned long long)s.mapped_bytes,
            (unsigned long long)s.segments, (unsigned long long)s.purged_bytes,
            (unsigned long long)s.large_count, (unsigned long long)s.large_bytes,
            (unsigned long long)s.mapped_bytes, (unsigned long long)s.mapped_bytes);
    return 0;
}
