/*
 * ubsan_canary.c - proves test-ubsan's plumbing before the suite runs: a
 * UBSan report raised from inside tally's malloc (a user hook runs there,
 * with tally's re-entry flag set) must be printed to the log, must not
 * deadlock, and must make the process fail. Linked against
 * build/ubsan/libtally.so; this file is itself built with
 * -fsanitize=undefined -fno-sanitize-recover=undefined.
 */
#include <stdio.h>
#include <stdlib.h>
#include "tally.h"

static volatile int shift = 40;
static void *volatile sink;

static void on_alloc(void *p, size_t size, void *ctx)
{
    (void)p, (void)ctx;
    if (size == 777)
        printf("%d\n", 1 << shift);   /* shift exponent too large: a report */
}

int main(void)
{
    static const struct tally_hooks hooks = { sizeof hooks, on_alloc, NULL, NULL, NULL };
    tally_hooks_set(&hooks);
    sink = malloc(100);
    free(sink);
    sink = malloc(777);
    free(sink);
    printf("canary: not caught\n");
    return 0;
}
