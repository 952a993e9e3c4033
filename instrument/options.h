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
    OPT_COUNT
};

struct option_def {
    const char *name;
    uint64_t def, min, max;
    const char *doc;
};

extern HIDDEN const struct option_def options_table[OPT_COUNT];
extern HIDDEN uint64_t options_value[OPT_COUNT];

/* Reads TALLY_OPTIONS once environ exists; later calls do nothing. */
HIDDEN void options_load_env(void);
/* 0 on success, -1 for an unknown name, -2 for a bad or out-of-range value. */
HIDDEN int options_set(const char *name, size_t name_len, const char *value, size_t value_len);
HIDDEN int options_find(const char *name, size_t name_len);

#endif
