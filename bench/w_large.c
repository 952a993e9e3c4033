/*
 * w_large.c - large blocks (the malloc-large shape): blocks of 256 KiB to
 * 32 MiB are allocated, touched page by page and freed in a loop, with a few
 * kept alive at a time. This is where an allocator's choice between keeping
 * large free memory and giving it back to the kernel shows: giving it back
 * means every new block is faulted in again (sys time), keeping it costs RSS.
 *
 * usage: w_large [-n allocations=1000] [-k live blocks=8]
 *                [-a min KiB=256] [-b max KiB=32768]
 *
 * Sizes are log-uniform in [-a, -b]. Each block gets one byte per 4 KiB
 * page, and its first and last bytes are checked before it is freed.
 */
#include "bench_util.h"

typedef struct {
    uint8_t *ptr;
    size_t size;
} block;

static void touch(block *b, uint8_t tag)
{
    for (size_t off = 0; off < b->size; off += BU_PAGE)
        b->ptr[off] = tag;
    bu_fill(b->ptr, b->size, tag, 0);
}

int main(int argc, char **argv)
{
    long n = 1000, k = 8, lo = 256, hi = 32768;
    int opt;
    while ((opt = getopt(argc, argv, "n:k:a:b:")) != -1) {
        switch (opt) {
        case 'n': n = bu_arg_long(optarg, "-n"); break;
        case 'k': k = bu_arg_long(optarg, "-k"); break;
        case 'a': lo = bu_arg_long(optarg, "-a"); break;
        case 'b': hi = bu_arg_long(optarg, "-b"); break;
        default:
            fprintf(stderr, "usage: %s [-n allocations] [-k live] [-a KiB] [-b KiB]\n",
                    argv[0]);
            return 64;
        }
    }
    if (k < 1 || k > 1024 || lo < 1 || hi < lo)
        bu_fail("bad arguments");

    block live[1024] = { { 0 } };
    uint8_t tags[1024] = { 0 };
    bu_rng rng = { 7 };
    double bytes = 0;
    double t0 = bu_now_s();
    for (long i = 0; i < n; i++) {
        size_t j = (size_t)bu_below(&rng, (uint64_t)k);
        if (live[j].ptr) {
            bu_verify(live[j].ptr, live[j].size, tags[j], "large");
            free(live[j].ptr);
        }
        live[j].size = bu_log_size(&rng, (size_t)lo << 10, (size_t)hi << 10);
        live[j].ptr = bu_check(malloc(live[j].size), live[j].size);
        tags[j] = (uint8_t)(i | 1);
        touch(&live[j], tags[j]);
        bytes += (double)live[j].size;
    }
    for (long j = 0; j < k; j++) {
        if (live[j].ptr) {
            bu_verify(live[j].ptr, live[j].size, tags[j], "large");
            free(live[j].ptr);
        }
    }
    double s = bu_now_s() - t0;
    printf("%ld large blocks (%.0f MiB in all) in %.3f s\n", n, bytes / 1048576, s);
    bu_metric("us_per_block", s * 1e6 / (double)n);
    return 0;
}
