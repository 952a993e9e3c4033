/*
 * instr_pairs.c - the tiny program `make bench-instructions` runs under
 * callgrind: N malloc+free pairs of one size, nothing else.
 *
 * usage: instr_pairs SIZE N [malloc|calloc]
 *
 * With `calloc`, each pair is calloc(1, SIZE)+free instead.
 * One warm-up pair runs even when N is 0, so start-up, first-use
 * initialisation and exit are the same in every run; the difference between
 * the N-pair run and the 0-pair run, divided by N, is the cost of one pair
 * including the loop (as in the anchors' table).
 */
#include "bench_util.h"

static void *volatile sink;

int main(int argc, char **argv)
{
    int zeroed = argc == 4 && strcmp(argv[3], "calloc") == 0;
    if (argc < 3 || argc > 4 || (argc == 4 && !zeroed && strcmp(argv[3], "malloc") != 0)) {
        fprintf(stderr, "usage: %s SIZE N [malloc|calloc]\n", argv[0]);
        return 64;
    }
    size_t size = (size_t)bu_arg_long(argv[1], "SIZE");
    long n = bu_arg_long(argv[2], "N");

    void *warm = bu_check(zeroed ? calloc(1, size) : malloc(size), size);
    sink = warm;
    free(warm);
    if (zeroed) {
        for (long i = 0; i < n; i++) {
            void *p = calloc(1, size);
            sink = p;
            free(p);
        }
        return 0;
    }
    for (long i = 0; i < n; i++) {
        void *p = malloc(size);
        sink = p;
        free(p);
    }
    return 0;
}
