/*
 * uses_malloc.c - a plain program for the linking tests. It allocates, then
 * asks (through dlsym, so it needs no tally at link time) whether tally is
 * the malloc it got. Built twice: plain (run under LD_PRELOAD) and linked
 * statically against libtally.a (-DSTATIC_TALLY).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tally.h"

int main(void)
{
    void *blocks[1000];
    for (int i = 0; i < 1000; i++) {
        blocks[i] = malloc(100 + i);
        memset(blocks[i], 1, 100 + i);
    }
#ifdef STATIC_TALLY
    const char *(*version)(void) = tally_version;
    int (*stats)(struct tally_stats *) = tally_stats_get;
#else
    const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "tally_version");
    int (*stats)(struct tally_stats *) =
        (int (*)(struct tally_stats *))dlsym(RTLD_DEFAULT, "tally_stats_get");
#endif
    if (!version || !stats) {
        printf("system\n");
        return 0;
    }
    struct tally_stats s = { .size = sizeof s };
    stats(&s);
    printf("tally %s allocated=%s\n", version(),
           s.allocated_bytes >= 100000 ? "yes" : "no");
    for (int i = 0; i < 1000; i++)
        free(blocks[i]);
    return 0;
}
