/*
 * instr_pairs.c - the tiny program `make bench-instructions` runs under
 * callgrind: N malloc+free pairs of one size, nothing else.
 *
 * usage: instr_pairs SIZE N
 *
 * One warm-up pair runs even when N is 0, so start-up, first-use
 * initialisation and exit are the same in every run; the difference between
 * the N-pair run and the 0-pair run, divided by N, is the cost of one pair
 * including the loop (as in the anchors' table).
 */
#include "bench_util.h"

static void *volatile sink;

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s SIZE N\n", argv[0]);
        return 64;
    }
    size_t size = (size_t)bu_arg_long(argv[1], "SIZE");
    long n = bu_arg_long(argv[2], "N");

    void *warm = bu_check(malloc(size), size);
    sink = warm;
    free(warm);
    for (long i = 0; i < n; i++) {
        void *p = malloc(size);
        sink = p;
        free(p);
    }
    return 0;
}
