/*
 * calloc_fresh.c - how many page faults a calloc of 500,000 B takes in a
 * fresh process, where its block is carved from memory nothing wrote:
 * tally leaves such a block untouched (alloc/page.h, page_zero_block).
 * Prints the count, then "zero" if the block reads zero throughout.
 * (A fresh process: a test's own process inherits a heap from its
 * runner, whose pages may be reused.)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>

static long minor_faults(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

int main(void)
{
    void *volatile warm = malloc(100);   /* start-up outside the count */
    long before = minor_faults();
    unsigned char *volatile p = calloc(1, 500000);
    long inside = minor_faults() - before;
    if (!p)
        return 1;
    int zero = 1;
    for (size_t k = 0; k < 500000; k++)
        zero &= p[k] == 0;
    printf("%ld\n%s\n", inside, zero ? "zero" : "not zero");
    free(p);
    free(warm);
    return 0;
}
