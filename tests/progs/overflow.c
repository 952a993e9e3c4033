/*
 * overflow.c - compiled once, run twice by test_debug.c: plainly (the
 * off-by-one goes unnoticed) and with TALLY_OPTIONS=debug=1 (tally reports
 * it at free and aborts). Nothing about tally is compiled in.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    char *volatile p = malloc(64);
    memset(p, 'x', 65);            /* one byte too many */
    free(p);
    printf("no error seen\n");
    return 0;
}
