/*
 * vg_expect.c - a deliberate leak and a deliberate one-byte overflow, run by
 * test-valgrind under memcheck with tally preloaded.
 *
 * EXPECTED TO BE DETECTED LATER. Today memcheck cannot see tally's blocks:
 * tally gets its memory with mmap and memcheck only knows malloc blocks of
 * the allocators it replaces, so both mistakes go unreported and the run
 * must be clean. Once tally describes its blocks with valgrind client
 * requests (VALGRIND_MALLOCLIKE_BLOCK with the requested size,
 * VALGRIND_FREELIKE_BLOCK), memcheck must report both: the write at
 * offset 24 of a 24-byte request lands in the slack of a 32-byte block, so
 * only a block described with its requested size catches it. test-valgrind
 * switches between the two expectations by looking for the client-request
 * instruction sequence in libtally.so.
 */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) static void leak(void)
{
    void *volatile q = malloc(100);
    q = NULL;                          /* 100 bytes definitely lost */
}

int main(void)
{
    char *volatile p = malloc(24);
    p[24] = 'x';                       /* one byte past the request */
    free(p);
    leak();
    printf("vg_expect: done\n");
    return 0;
}
