/*
 * w_bufchurn.c - a threaded server's buffers: each thread keeps -b live
 * buffers of log-uniform size between -s and -S and replaces one at random
 * per step, writing every byte of the new one and checking the old one
 * before it goes.
 *
 * usage: w_bufchurn [-t threads=2] [-n steps per thread=50000]
 *                   [-b buffers per thread=64] [-s smallest=32768]
 *                   [-S largest=262144] [-r seed=7]
 *
 * The sizes sit between the class blocks and the mmap threshold, where an
 * allocator's blocks come from memory the threads share (tally's span
 * segments, glibc's arenas, jemalloc's extents): what counts is how the
 * threads share it, at what lock cost, and how much of the freed memory
 * the next request of another size reuses warm. Written whole, so the
 * page faults show in the time.
 */
#include "bench_util.h"

static long steps = 50000, nbuf = 64;
static size_t lo = 32u << 10, hi = 256u << 10;
static long seed = 7;

static void *worker(void *arg)
{
    bu_rng rng = { (uint64_t)seed * 1000003u + (uint64_t)(uintptr_t)arg + 1 };
    uint8_t **v = bu_check(calloc((size_t)nbuf, sizeof *v), (size_t)nbuf * sizeof *v);
    size_t *n = bu_check(calloc((size_t)nbuf, sizeof *n), (size_t)nbuf * sizeof *n);
    for (long s = 0; s < steps; s++) {
        size_t j = (size_t)bu_below(&rng, (uint64_t)nbuf);
        if (v[j]) {
            bu_verify(v[j], n[j], (uint8_t)(j + 1), "bufchurn");
            free(v[j]);
        }
        n[j] = bu_log_size(&rng, lo, hi);
        v[j] = bu_check(malloc(n[j]), n[j]);
        bu_fill(v[j], n[j], (uint8_t)(j + 1), 1);
    }
    for (long j = 0; j < nbuf; j++) {
        if (v[j])
            bu_verify(v[j], n[j], (uint8_t)(j + 1), "bufchurn");
        free(v[j]);
    }
    free(v);
    free(n);
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = 2;
    int opt;
    while ((opt = getopt(argc, argv, "t:n:b:s:S:r:")) != -1) {
        switch (opt) {
        case 't': nthreads = bu_arg_long(optarg, "-t"); break;
        case 'n': steps = bu_arg_long(optarg, "-n"); break;
        case 'b': nbuf = bu_arg_long(optarg, "-b"); break;
        case 's': lo = (size_t)bu_arg_long(optarg, "-s"); break;
        case 'S': hi = (size_t)bu_arg_long(optarg, "-S"); break;
        case 'r': seed = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-t threads] [-n steps] [-b buffers] [-s smallest] "
                    "[-S largest] [-r seed]\n", argv[0]);
            return 64;
        }
    }
    if (nthreads < 1 || nthreads > 256 || steps < 1 || nbuf < 1 || nbuf > 100000 || lo < 16 ||
        hi < lo || hi > (1u << 30))
        bu_fail("need 1 <= -t <= 256, -n >= 1, 1 <= -b <= 100000, 16 <= -s <= -S <= 1 GiB");
    long f0 = bu_minflt();
    double t0 = bu_now_s();
    bu_run_threads(nthreads, worker);
    double s = bu_now_s() - t0;
    printf("%ld threads x %ld steps over %ld buffers in %.3f s\n", nthreads, steps, nbuf, s);
    bu_metric("ns_per_step", s * 1e9 / (double)steps);
    bu_metric("faults_per_step", (double)(bu_minflt() - f0) / (double)(steps * nthreads));
    return 0;
}
