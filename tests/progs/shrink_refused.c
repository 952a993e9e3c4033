/*
 * shrink_refused.c - a shrinking realloc whose new block's mapping the
 * kernel refuses (test_fail_mmap) must still succeed, in every mode:
 * run by test_linking.c with tally preloaded, under memcheck too.
 * Exits with the number of the step that failed, 0 when all passed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    int (*set)(const char *, const char *) = (int (*)(const char *, const char *))
        dlsym(RTLD_DEFAULT, "tally_option_set");
    if (!set)
        return 10;
    unsigned char *p = malloc(2 << 20);
    if (!p)
        return 11;
    memset(p, 7, 2 << 20);
    set("test_fail_mmap", "1");
    unsigned char *q = realloc(p, 1 << 20);
    set("test_fail_mmap", "0");
    if (!q)
        return 12;
    if (q[0] != 7 || q[(1 << 20) - 1] != 7)
        return 13;
    free(q);
    printf("done\n");
    return 0;
}
