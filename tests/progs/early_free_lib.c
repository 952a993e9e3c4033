/*
 * early_free_lib.c - a library whose constructor frees before tally's own
 * constructor has run: ld.so runs a program's libraries' constructors
 * before a preloaded library's, so this one meets tally before start-up,
 * when the segment map is not mapped yet (alloc/segment.h). free(NULL)
 * must return, a malloc must start tally up, and its block must free.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void free_early(void)
{
    free(NULL);
    char *p = malloc(100);
    if (!p)
        _exit(3);
    memset(p, 1, 100);
    free(p);
    static const char msg[] = "early ok\n";
    if (write(1, msg, sizeof msg - 1) < 0)
        _exit(4);
}
