/*
 * w_bufcycle.c - a server's request buffers: a batch of large buffers
 * live at once, each allocated at a guessed size and written, then grown
 * with realloc to twice that (the body outgrew the guess) and written,
 * -g times, and the whole batch freed before the next one comes in.
 *
 * usage: w_bufcycle [-n rounds=10] [-b buffers=100] [-s smallest=131072]
 *                   [-S largest=1048576] [-g growths=1] [-r seed=11]
 *
 * First sizes are log-uniform between -s and -S, so the batch straddles
 * the mmap thresholds (glibc's 128 KiB, tally's 512 KiB): what counts is
 * whether the next batch gets the last one's pages back warm or maps and
 * faults them in again, and how many system calls that takes. Every byte
 * is written, so the page faults show in the time. With -g 2 each
 * buffer moves twice while its neighbours are live: where the second
 * move lands (a mapping apiece, or the room the first moves vacated)
 * shows in the peak RSS and the system calls.
 */
#include "bench_util.h"

struct buf {
    uint8_t *p;
    size_t size, first;
};

int main(int argc, char **argv)
{
    long rounds = 10, nbuf = 100, growths = 1, seed = 11;
    size_t lo = 128u << 10, hi = 1u << 20;
    int opt;
    while ((opt = getopt(argc, argv, "n:b:s:S:g:r:")) != -1) {
        switch (opt) {
        case 'n': rounds = bu_arg_long(optarg, "-n"); break;
        case 'b': nbuf = bu_arg_long(optarg, "-b"); break;
        case 's': lo = (size_t)bu_arg_long(optarg, "-s"); break;
        case 'S': hi = (size_t)bu_arg_long(optarg, "-S"); break;
        case 'g': growths = bu_arg_long(optarg, "-g"); break;
        case 'r': seed = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-n rounds] [-b buffers] [-s smallest] "
                    "[-S largest] [-g growths] [-r seed]\n", argv[0]);
            return 64;
        }
    }
    if (rounds < 1 || nbuf < 1 || nbuf > 100000 || lo < 16 || hi < lo || hi > (1u << 30) ||
        growths < 1 || growths > 8)
        bu_fail("need -n >= 1, 1 <= -b <= 100000, 16 <= -s <= -S <= 1 GiB and 1 <= -g <= 8");
    struct buf *b = bu_check(calloc((size_t)nbuf, sizeof *b), 1);
    bu_rng rng = { (uint64_t)seed };
    long f0 = bu_minflt();
    double t0 = bu_now_s();
    for (long r = 0; r < rounds; r++) {
        uint8_t tag = (uint8_t)(r * 7 + 1);
        for (long i = 0; i < nbuf; i++) {
            b[i].size = bu_log_size(&rng, lo, hi);
            b[i].first = b[i].size;
            b[i].p = bu_check(malloc(b[i].size), b[i].size);
            bu_fill(b[i].p, b[i].size, tag, 1);
        }
        /* Growth g writes its new half with grown(g); the first one's is
         * tag ^ 0x5a, as before -g existed. */
#define grown(g) ((uint8_t)(tag ^ (uint8_t)(0x5a + (g) - 1)))
        for (long g = 1; g <= growths; g++) {
            for (long i = 0; i < nbuf; i++) {
                size_t old = b[i].size;
                b[i].p = bu_check(realloc(b[i].p, 2 * old), 2 * old);
                bu_verify(b[i].p, b[i].first, tag, "bufcycle: realloc");
                if (g > 1 && b[i].p[old - 1] != grown(g - 1))
                    bu_fail("bufcycle: round %ld, buffer %ld lost growth %ld", r, i, g - 1);
                memset(b[i].p + old, grown(g), old);
                b[i].size = 2 * old;
            }
        }
        for (long i = 0; i < nbuf; i++) {
            size_t half = b[i].size / 2;
            if (b[i].p[half] != grown(growths) || b[i].p[b[i].size - 1] != grown(growths))
                bu_fail("bufcycle: round %ld, buffer %ld lost its grown half", r, i);
            free(b[i].p);
        }
#undef grown
    }
    double s = bu_now_s() - t0;
    printf("%ld rounds of %ld buffers in %.3f s\n", rounds, nbuf, s);
    bu_metric("ms_per_round", s * 1e3 / (double)rounds);
    bu_metric("faults_per_round", (double)(bu_minflt() - f0) / (double)rounds);
    free(b);
    return 0;
}
