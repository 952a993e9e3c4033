/*
 * options.h - the one table of tally's settings.
 *
 * Values come, in this order, from the defaults, TALLY_OPTIONS
 * (comma-separated key=value, read from environ without allocating) and
 * later calls to tally_option_set() or mallopt().
 */
#ifndef TALLY_OPTIONS_H
#define TALLY_OPTIONS_H

#include "../alloc/internal.h"

enum option_id {
    OPT_MMAP_THRESHOLD,
    OPT_PURGE_DELAY,
    OPT_LARGE_CACHE,
    OPT_PURGE_BATCH,
    OPT_DEBUG,
    OPT_TIMING,
    OPT_STATS,
    OPT_LEAKS,
    OPT_QUARANTINE,
    OPT_BACKTRACE,
    OPT_ABORT,
    OPT_REPORT,
    OPT_TEST_FAIL_MMAP,
    OPT_SECURE,
    OPT_BACKGROUND,
    OPT_COUNT
};

struct option_def {
    const char *name;
    uint64_t def, min, max;
    bool is_string;       /* value kept as text (only `report`) */
    bool switches_mode;   /* changing it re-evaluates the hooks and the fast
                             paths' limits (hooks_update) */
    const char *doc;
};

#define OPTION_STRING_MAX 256

extern HIDDEN const struct option_def options_table[OPT_COUNT];
extern HIDDEN uint64_t options_value[OPT_COUNT];
/* The `report` destination: "stderr" or a file path. */
extern HIDDEN char options_report[OPTION_STRING_MAX];

static inline uint64_t option(enum option_id id)
{
    return __atomic_load_n(&options_value[id], __ATOMIC_RELAXED);
}

/* Reads TALLY_OPTIONS once environ exists; later calls do nothing. */
HIDDEN void options_load_env(void);
/* 0 on success, -1 for an unknown name, -2 for a bad or out-of-range value. */
HIDDEN int options_set(const char *name, size_t name_len, const char *value, size_t value_len);
/* options_set() for a number option already parsed: 0, or -2 out of range. */
HIDDEN int options_set_value(enum option_id id, uint64_t v);
HIDDEN int options_find(const char *name, size_t name_len);

#endif
