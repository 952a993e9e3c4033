/*
 * w_asterisk.c - the "asterisk loop" seed (seeds/000): TEST_RUNS runs of
 * REPETITION_COUNT x { mem = malloc(4000); free(mem); }, each run timed,
 * then the average in microseconds, as in the 2018 Asterisk unit test.
 *
 * usage: w_asterisk [-n runs=10] [-i pairs per run=10000000] [-s size=4000]
 *
 * The pointer escapes through a volatile store so the compiler can neither
 * elide the pair nor hoist it out of the loop; the loop itself is left bare
 * (no writes into the block) because the seed measured exactly that.
 */
#include "bench_util.h"

static void *volatile sink;

/* One timed run; returns its duration in microseconds. */
static double run_pairs(unsigned long count, size_t size)
{
    uint64_t start = bu_now_ns();
    while (count--) {
        void *mem = malloc(size);
        if (__builtin_expect(mem == NULL, 0))
            bu_fail("malloc(%zu) returned NULL", size);
        sink = mem;
        free(mem);
    }
    return (double)(bu_now_ns() - start) / 1e3;
}

/* The block must still be usable memory of the requested size. */
static void self_check(size_t size)
{
    unsigned char *p = bu_check(malloc(size), size);
    bu_fill(p, size, 0xa5, 1);
    for (size_t i = 1; i + 1 < size; i++)
        if (p[i] != 0xa5)
            bu_fail("byte %zu of a %zu-byte block changed", i, size);
    bu_verify(p, size, 0xa5, "asterisk");
    free(p);
}

int main(int argc, char **argv)
{
    long runs = 10, count = 10000000;
    size_t size = 4000;
    int opt;
    while ((opt = getopt(argc, argv, "n:i:s:")) != -1) {
        switch (opt) {
        case 'n': runs = bu_arg_long(optarg, "-n"); break;
        case 'i': count = bu_arg_long(optarg, "-i"); break;
        case 's': size = (size_t)bu_arg_long(optarg, "-s"); break;
        default:
            fprintf(stderr, "usage: %s [-n runs] [-i pairs] [-s size]\n", argv[0]);
            return 64;
        }
    }
    if (runs < 1 || count < 1)
        bu_fail("need at least one run of one pair");

    self_check(size);
    double total = 0;
    for (long r = 0; r < runs; r++) {
        double us = run_pairs((unsigned long)count, size);
        printf("Executed malloc/free %ld times in %.0f us\n", count, us);
        total += us;
    }
    double avg = total / (double)runs;
    printf("Average malloc/free time %.0f us\n", avg);
    self_check(size);

    bu_metric("avg_us_per_run", avg);
    bu_metric("ns_per_pair", avg * 1e3 / (double)count);
    return 0;
}
