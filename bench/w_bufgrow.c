/*
 * w_bufgrow.c - buffers grown by doubling: a string builder, a file read
 * whole, a vector pushed to. Each round appends 4 KiB chunks to one buffer
 * until it reaches a size drawn log-uniformly between 16 KiB and -s bytes,
 * doubling the capacity with realloc whenever a chunk does not fit, then
 * checks it and frees it.
 *
 * usage: w_bufgrow [-n rounds=2000] [-s largest buffer=8388608] [-r seed=7]
 *
 * Every byte appended is written, so what counts is how realloc grows a
 * block: in place (glibc at the top of its heap, mremap above its mmap
 * threshold), by moving page tables, or by copying into a new block at
 * each class change, and whether the next round gets the last one's
 * pages back warm or faults fresh ones in.
 */
#include "bench_util.h"

#define CHUNK 4096u

/* The byte written at offset `off` of round `round`'s buffer. */
static inline uint8_t mark(size_t off, long round)
{
    return (uint8_t)((off / CHUNK) * 31u + (size_t)round);
}

static void one_round(long round, size_t target)
{
    uint8_t *p = NULL;
    size_t cap = 0, len = 0;
    while (len < target) {
        if (len + CHUNK > cap) {
            size_t want = cap ? 2 * cap : 64;
            while (want < len + CHUNK)
                want *= 2;
            p = bu_check(realloc(p, want), want);
            cap = want;
        }
        memset(p + len, mark(len, round), CHUNK);
        len += CHUNK;
    }
    /* First and last byte of every chunk: a move that lost or shifted a
     * page shows here. */
    for (size_t off = 0; off < len; off += CHUNK)
        if (p[off] != mark(off, round) || p[off + CHUNK - 1] != mark(off, round))
            bu_fail("bufgrow: round %ld, chunk at %zu of %zu lost its bytes", round, off, len);
    free(p);
}

int main(int argc, char **argv)
{
    long rounds = 2000, seed = 7;
    size_t largest = 8u << 20;
    int opt;
    while ((opt = getopt(argc, argv, "n:s:r:")) != -1) {
        switch (opt) {
        case 'n': rounds = bu_arg_long(optarg, "-n"); break;
        case 's': largest = (size_t)bu_arg_long(optarg, "-s"); break;
        case 'r': seed = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-n rounds] [-s largest buffer] [-r seed]\n", argv[0]);
            return 64;
        }
    }
    if (rounds < 1 || largest < (16u << 10))
        bu_fail("need -n >= 1 and -s >= 16384");
    bu_rng rng = { (uint64_t)seed };
    size_t appended = 0;
    long f0 = bu_minflt();
    double t0 = bu_now_s();
    for (long r = 0; r < rounds; r++) {
        size_t target = bu_log_size(&rng, 16u << 10, largest);
        one_round(r, target);
        appended += (target + CHUNK - 1) / CHUNK * CHUNK;
    }
    double s = bu_now_s() - t0;
    printf("%ld buffers, %.1f MiB appended in %.3f s\n", rounds,
           (double)appended / (1 << 20), s);
    bu_metric("us_per_round", s * 1e6 / (double)rounds);
    bu_metric("faults_per_round", (double)(bu_minflt() - f0) / (double)rounds);
    return 0;
}
