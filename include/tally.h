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

/* Reads a numeric option's current value, as set (mmap_threshold reads
 * back what was set, not the effective 8 KiB..512 KiB). 0, or -1 with
 * errno = EINVAL. `report` is a string: it reads as 0. */
int tally_option_get(const char *name, uint64_t *value);

/* ---- statistics --------------------------------------------------------
 * A snapshot of the allocator's state. Set `size` to sizeof(struct
 * tally_stats) before the call; tally fills at most that many bytes and
 * sets `version` to TALLY_STATS_VERSION (the library's, whatever `size`
 * covers). Counters are derived from heap state when read, so they
 * cost the fast path nothing. */
struct tally_stats {
    size_t size;
    uint32_t version;
    uint32_t reserved0;
    uint64_t allocated_bytes;   /* handed out (class sizes, large mappings) */
    uint64_t active_bytes;      /* in pages assigned to a class, and large */
    uint64_t mapped_bytes;      /* mapped from the OS right now */
    uint64_t large_count;       /* live large blocks (span runs and mappings) */
    uint64_t large_bytes;
    uint64_t segments;
    uint64_t purged_bytes;      /* handed back with madvise, ever */
    uint64_t mmap_calls, munmap_calls, mremap_calls, madvise_calls;
    /* version 1 ends here; version 2 adds: */
    uint64_t resident_bytes;    /* segment pages in RAM (mincore) + large
                                   + cached_bytes */
    /* version 3 adds: */
    uint64_t cached_bytes;      /* freed large blocks kept for reuse: free
                                   span units and cached mappings */
};
#define TALLY_STATS_VERSION 3

/* 0 on success, -1 with errno = EINVAL when stats is NULL or too small. */
int tally_stats_get(struct tally_stats *stats);

enum { TALLY_STATS_TEXT = 0, TALLY_STATS_JSON = 1 };
/* Writes the statistics and a per-size-class table to fd (fd < 0: the
 * `report` option's destination). 0, or -1 with errno = EINVAL. */
int tally_stats_print(int fd, int format);

/* ---- debug mode (debug=1) ------------------------------------------------ */

/* Checks the fences of every live debug block and the poison of every
 * quarantined one, reports each problem, and returns how many it found. */
size_t tally_check(void);

/* Reports live debug blocks grouped by allocation site, largest first;
 * returns the number of blocks. Also printed at exit when debug was on. */
size_t tally_report_leaks(void);

/* ---- timing mode (timing=1) ----------------------------------------------- */

enum { TALLY_OP_MALLOC, TALLY_OP_CALLOC, TALLY_OP_ALIGNED, TALLY_OP_REALLOC, TALLY_OP_FREE,
       TALLY_OP_COUNT };
#define TALLY_TIMING_BUCKETS 32   /* bucket b counts calls of 2^b..2^(b+1) ns */

struct tally_timing_op {
    uint64_t count, total_ns, max_ns;
    uint64_t buckets[TALLY_TIMING_BUCKETS];
};

struct tally_timing {
    size_t size;                 /* set to sizeof(struct tally_timing) */
    uint32_t version;
    uint32_t reserved0;
    uint64_t clock_overhead_ns;  /* measured once, subtracted from samples */
    struct tally_timing_op ops[TALLY_OP_COUNT];
    uint64_t minor_faults[TALLY_OP_COUNT], major_faults[TALLY_OP_COUNT];
    uint64_t syscalls[4], syscall_ns[4];   /* mmap, munmap, mremap, madvise */
};
#define TALLY_TIMING_VERSION 1

int tally_timing_get(struct tally_timing *timing);
/* One operation's histogram for the size class that serves `size`. */
int tally_timing_get_class(int op, size_t size, struct tally_timing_op *out);
void tally_timing_reset(void);

/* ---- user hooks -------------------------------------------------------------
 * Called after each allocation, before each free, after each realloc, from
 * the calling thread. A callback may itself allocate: those nested calls
 * are served plainly and not reported. NULL removes the hooks. */
struct tally_hooks {
    size_t size;                 /* sizeof(struct tally_hooks) */
    void (*on_alloc)(void *ptr, size_t size, void *ctx);
    void (*on_free)(void *ptr, void *ctx);
    void (*on_realloc)(void *old_ptr, void *new_ptr, size_t size, void *ctx);
    void *ctx;
};
int tally_hooks_set(const struct tally_hooks *hooks);

#ifdef __cplusplus
}
#endif

#endif
