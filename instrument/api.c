/*
 * api.c - the public tally_* functions for options and the version.
 * Statistics, timing, debug checks and hooks live with their modules.
 */
#include "../include/tally.h"
#include "options.h"
#include "../alloc/init.h"
#include "../alloc/background.h"

#include <errno.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

EXPORT const char *tally_version(void) { return "0.1.0"; }

EXPORT int tally_option_set(const char *name, const char *value)
{
    init_ensure();
    if (!name || !value || options_set(name, strlen(name), value, strlen(value)) != 0) {
        errno = EINVAL;
        return -1;
    }
    background_update();        /* background=0/1 starts or stops the thread */
    return 0;
}

EXPORT int tally_option_get(const char *name, uint64_t *value)
{
    init_ensure();
    int id = name && value ? options_find(name, strlen(name)) : -1;
    if (id < 0) {
        errno = EINVAL;
        return -1;
    }
    *value = option((enum option_id)id);
    return 0;
}
