/*
 * memcheck_bugs.c - a use after free that only memcheck can see, run by
 * test_linking.c under valgrind with tally preloaded: memcheck must report
 * it, which proves tally described its blocks to memcheck.
 */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    char *volatile p = malloc(64);
    p[0] = 1;
    free(p);
    p[20] = 1;             /* use after free (the first 16 bytes are tally's) */
    printf("done\n");
    return 0;
}
