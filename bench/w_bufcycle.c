/*
 * w_bufcycle.c - a server's request buffers: a batch of large buffers
 * live at once, each allocated at a guessed size and written, then grown
 * once with realloc to twice that (the body outgrew the guess) and
 * written, and the whole batch freed before the next one comes in.
 *
 * usage: w_bufcycle [-n rounds=10] [-b buffers=100] [-s smallest=131072]
 *                   [-S largest=1048576] [-r seed=11]
 *
 * First sizes are log-uniform between -s and -S, so the batch straddles
 * the mmap thresholds (glibc's 128 KiB, tally's 512 KiB): what counts is
 * whether the next batch gets the last one's pages back warm or maps and
 * faults them in again, and how many system calls that takes. Every byte
 * is written, so the page faults show in the time.
 */
#include "bench_util.h"

struct buf {
    uint8_t *p;
    size_t size;
};

int main(int argc, char **argv)
{
    long rounds = 10, nbuf = 100, seed = 11;
    size_t lo = 128u << 10, hi = 1u << 20;
    int opt;
    while ((opt = getopt(argc, argv, "n:b:s:S:r:")) != -1) {
        switch (opt) {
        case 'n': rounds = bu_arg_long(optarg, "-n"); break;
        case 'b': nbuf = bu_arg_long(optarg, "-b"); break;
        case 's': lo = (size_t)bu_arg_long(optarg, "-s"); break;
        case 'S': hi = (size_t)bu_arg_long(optarg, "-S"); break;
        case 'r': seed = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-n rounds] [-b buffers] [-s smallest] "
                    "[-S largest] [-r seed]\n", argv[0]);
            return 64;
        }
    }
    if (rounds < 1 || nbuf < 1 || nbuf > 100000 || lo < 16 || hi < lo || hi > (1u << 30))
        bu_fail("need -n >= 1, 1 <= -b <= 100000 and 16 <= -s <= -S <= 1 GiB");
    struct buf *b = bu_check(calloc((size_t)nbuf, sizeof *b), 1);
    bu_rng rng = { (uint64_t)seed };
    long f0 = bu_minflt();
    double t0 = bu_now_s();
    for (long r = 0; r < rounds; r++) {
        uint8_t tag = (uint8_t)(r * 7 + 1);
        for (long i = 0; i < nbuf; i++) {
            b[i].size = bu_log_size(&rng, lo, hi);
            b[i].p = bu_check(malloc(b[i].size), b[i].size);
            bu_fill(b[i].p, b[i].size, tag, 1);
        }
        for (long i = 0; i < nbuf; i++) {
            size_t old = b[i].size;
            b[i].p = bu_check(realloc(b[i].p, 2 * old), 2 * old);
            bu_verify(b[i].p, old, tag, "bufcycle: realloc");
            memset(b[i].p + old, tag ^ 0x5a, old);
            b[i].size = 2 * old;
        }
        for (long i = 0; i < nbuf; i++) {
            size_t half = b[i].size / 2;
            if (b[i].p[half] != (uint8_t)(tag ^ 0x5a) || b[i].p[b[i].size - 1] != (uint8_t)(tag ^ 0x5a))
                bu_fail("bufcycle: round %ld, buffer %ld lost its grown half", r, i);
            free(b[i].p);
        }
    }
    double s = bu_now_s() - t0;
    printf("%ld rounds of %ld buffers in %.3f s\n", rounds, nbuf, s);
    bu_metric("ms_per_round", s * 1e3 / (double)rounds);
    bu_metric("faults_per_round", (double)(bu_minflt() - f0) / (double)rounds);
    free(b);
    return 0;
}
