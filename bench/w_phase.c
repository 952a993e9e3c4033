/*
 * w_phase.c - a program that moves between a phase of small blocks and one
 * of medium blocks, round after round: a batch of records comes in at
 * 4,000 B each, each record is then grown with realloc to its final size
 * (8.5..16 KB: a message or a row that turned out longer than its first
 * read), the batch is handed on and freed, and the next batch comes in.
 *
 * usage: w_phase [-n records=20000] [-r rounds=5] [-s smallest final=8500]
 *                [-S largest final=16000] [-x seed=5]
 *
 * Every page of every block is written. What counts is where each phase
 * finds its memory: the other phase's blocks were just freed, so an
 * allocator whose freed memory serves any size (glibc's chunks coalesce)
 * reuses it warm, while one that keeps small and medium blocks apart
 * holds the emptied pages of one phase beside the fresh ones of the next,
 * until it gives them back or hands them over.
 */
#include "bench_util.h"

#define FIRST 4000u

/* The byte written at offset `off` of record i in round r. */
static inline uint8_t mark(size_t i, size_t off, long r)
{
    return (uint8_t)(i * 7u + off / BU_PAGE + (size_t)r);
}

static void write_pages(uint8_t *p, size_t from, size_t to, size_t i, long r)
{
    for (size_t off = from; off < to; off += BU_PAGE)
        p[off] = mark(i, off, r);
    p[to - 1] = mark(i, to - 1, r);
}

int main(int argc, char **argv)
{
    long n = 20000, rounds = 5, seed = 5;
    size_t lo = 8500, hi = 16000;
    int opt;
    while ((opt = getopt(argc, argv, "n:r:s:S:x:")) != -1) {
        switch (opt) {
        case 'n': n = bu_arg_long(optarg, "-n"); break;
        case 'r': rounds = bu_arg_long(optarg, "-r"); break;
        case 's': lo = (size_t)bu_arg_long(optarg, "-s"); break;
        case 'S': hi = (size_t)bu_arg_long(optarg, "-S"); break;
        case 'x': seed = bu_arg_long(optarg, "-x"); break;
        default:
            fprintf(stderr, "usage: %s [-n records] [-r rounds] [-s smallest final] "
                    "[-S largest final] [-x seed]\n", argv[0]);
            return 64;
        }
    }
    if (n < 1 || rounds < 1 || lo <= FIRST || hi < lo)
        bu_fail("need -n >= 1, -r >= 1 and 4000 < -s <= -S");
    uint8_t **rec = bu_check(calloc((size_t)n, sizeof *rec), 1);
    size_t *size = bu_check(calloc((size_t)n, sizeof *size), 1);
    bu_rng rng = { (uint64_t)seed };
    long f0 = bu_minflt();
    double t0 = bu_now_s();
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < n; i++) {
            rec[i] = bu_check(malloc(FIRST), FIRST);
            write_pages(rec[i], 0, FIRST, (size_t)i, r);
        }
        for (long i = 0; i < n; i++) {
            size[i] = lo + (size_t)bu_below(&rng, hi - lo + 1);
            rec[i] = bu_check(realloc(rec[i], size[i]), size[i]);
            write_pages(rec[i], FIRST, size[i], (size_t)i, r);
        }
        for (long i = 0; i < n; i++) {
            /* The first record's bytes came along; the rest is this round's. */
            if (rec[i][0] != mark((size_t)i, 0, r) ||
                rec[i][size[i] - 1] != mark((size_t)i, size[i] - 1, r))
                bu_fail("phase: round %ld, record %ld lost its bytes", r, i);
            free(rec[i]);
        }
    }
    double s = bu_now_s() - t0;
    printf("%ld rounds of %ld records, %.3f s\n", rounds, n, s);
    bu_metric("ms_per_round", s * 1e3 / (double)rounds);
    bu_metric("faults_per_round", (double)(bu_minflt() - f0) / (double)rounds);
    free(size);
    free(rec);
    return 0;
}
