/*
 * vg_expect.c - a deliberate leak and a deliberate overflow, run by
 * test-valgrind under memcheck with tally preloaded.
 *
 * Memcheck sees them only when tally describes its blocks with client
 * requests (VALGRIND_MALLOCLIKE_BLOCK / FREELIKE_BLOCK, instrument/
 * valgrind.c); without them tally's blocks are plain mmap'd memory to
 * memcheck and both go unreported. test-valgrind looks for the
 * client-request instruction sequence in libtally.so and expects both
 * reports when it is there, a clean run when it is not.
 *
 * The overflow writes 8 bytes past the end of a 48-byte block into its
 * neighbour, which has just been freed: memcheck must call that an invalid
 * write whether tally describes blocks by requested or by usable size, and
 * natively the byte lands beyond the neighbour's free-list link, so the
 * program runs cleanly without valgrind too. An overflow into a block's own
 * slack (malloc(24) has 32 usable bytes) is not tried: memcheck sees it only
 * if blocks are described with their requested size, which tally does not
 * do (it describes the usable size, see hooks.c).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define N 64
#define SIZE 48

/* The leaked block must not be the first of its page: tally's page
 * descriptor (in mmap'd memory, which memcheck scans for pointers) points
 * at that one, so memcheck would call it "still reachable". */
__attribute__((noinline)) static void leak(void)
{
    void *volatile q = malloc(100);
    q = NULL;                          /* 100 bytes definitely lost */
}

int main(void)
{
    char *v[N];
    for (int i = 0; i < N; i++)
        v[i] = malloc(SIZE);
    /* Two blocks next to each other: a, then b right after it. */
    int ia = -1, ib = -1;
    for (int i = 0; i < N && ia < 0; i++)
        for (int j = 0; j < N; j++)
            if ((uintptr_t)v[j] == (uintptr_t)v[i] + SIZE) {
                ia = i;
                ib = j;
                break;
            }
    if (ia < 0) {
        printf("vg_expect: no two adjacent %d-byte blocks\n", SIZE);
        return 3;
    }
    char *volatile a = v[ia];
    free(v[ib]);
    a[SIZE + 24] = 'x';                /* overflow into the freed neighbour, past the
                                        * 16 bytes tally keeps for its own links */
    for (int i = 0; i < N; i++)
        if (i != ib)
            free(v[i]);
    void *volatile first = malloc(100);
    leak();
    free(first);
    printf("vg_expect: done\n");
    return 0;
}
