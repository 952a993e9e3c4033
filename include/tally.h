/*
 * tally.h - the public API of the tally allocator.
 *
 * The standard malloc family (malloc, free, calloc, realloc, ...) is
 * exported under its usual names and declared by <stdlib.h>/<malloc.h>;
 * this header adds tally's own controls. Nothing here is a macro that
 * changes what a caller compiles to: every feature is a function call into
 * the one libtally ABI, and every struct carries its own size so older
 * callers keep working when fields are added at the end.
 */
#ifndef TALLY_H
#define TALLY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TALLY_VERSION_MAJOR 0
#define TALLY_VERSION_MINOR 1

/* C23's sized deallocation, declared here because glibc 2.36's headers
 * predate it. tally treats both as free(ptr). */
void free_sized(void *ptr, size_t size);
void free_aligned_sized(void *ptr, size_t alignment, size_t size);

/* "MAJOR.MINOR.PATCH" of the library actually loaded. */
const char *tally_version(void);

/* Sets an option by name, as TALLY_OPTIONS would ("mmap_threshold", "64k").
 * Returns 0, or -1 with errno = EINVAL for an unknown name or bad value. */
int tally_option_set(const char *name, const char *value);

/* Reads an option's current value. 0, or -1 with errno = EINVAL. */
int tally_option_get(const char *name, uint64_t *value);

/* A snapshot of the allocator's state. Set `size` to sizeof(struct
 * tally_stats) before the call; tally fills at most that many bytes and
 * sets `version`. Counters are derived from heap state when read. */
struct tally_stats {
    size_t size;
    uint32_t version;
    uint32_t reserved0;
    uint64_t allocated_bytes;   /* handed out (class sizes, large mappings) */
    uint64_t active_bytes;      /* in pages assigned to a class, and large */
    uint64_t mapped_bytes;      /* mapped from the OS right now */
    uint64_t large_count;       /* live blocks above the mmap threshold */
    uint64_t large_bytes;
    uint64_t segments;
    uint64_t purged_bytes;      /* handed back with madvise, ever */
    uint64_t mmap_calls, munmap_calls, mremap_calls, madvise_calls;
};
#define TALLY_STATS_VERSION 1

/* 0 on success, -1 with errno = EINVAL when stats is NULL or too small. */
int tally_stats_get(struct tally_stats *stats);

#ifdef __cplusplus
}
#endif

#endif
