/*
 * api.c - the public tally_* functions: options by name, version, stats.
 */
#include "../include/tally.h"
#include "options.h"
#include "../alloc/usage.h"
#include "../alloc/init.h"

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
    *value = __atomic_load_n(&options_value[id], __ATOMIC_RELAXED);
    return 0;
}

EXPORT int tally_stats_get(struct tally_stats *out)
{
    if (!out || out->size < offsetof(struct tally_stats, allocated_bytes)) {
        errno = EINVAL;
        return -1;
    }
    struct usage u;
    usage_read(&u);
    struct tally_stats s = {
        .size = out->size,
        .version = TALLY_STATS_VERSION,
        .allocated_bytes = u.allocated_bytes + u.large_bytes,
        .active_bytes = u.page_bytes + u.large_bytes,
        .mapped_bytes = u.mapped_bytes,
        .large_count = u.large_count,
        .large_bytes = u.large_bytes,
        .segments = u.segments,
        .purged_bytes = u.purged_bytes,
        .mmap_calls = u.maps,
        .munmap_calls = u.unmaps,
        .mremap_calls = u.remaps,
        .madvise_calls = u.purges,
    };
    memcpy(out, &s, out->size < sizeof s ? out->size : sizeof s);
    return 0;
}
