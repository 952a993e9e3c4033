/*
 * w_frag.c - fragmentation: a million small objects are allocated, every
 * other one is freed, then medium objects totalling the freed bytes are
 * allocated. The holes left by the small objects are too small for the
 * medium ones, so an allocator that cannot reuse or return them grows.
 * RSS is read after each stage.
 *
 * usage: w_frag [-n small objects=1000000] [-r rounds=3]
 *
 * Stages of one round: small (16..64 B) -> holes (every other one freed)
 * -> medium (256..2048 B, as many bytes as were freed) -> small freed
 * (the rest of the small ones) -> end (everything freed). Metrics are the
 * RSS of each stage in the first round, plus the RSS after the last round
 * and the peak; later rounds show whether the holes get reused.
 */
#include "bench_util.h"

typedef struct {
    uint8_t *ptr;
    uint32_t size;
} item;

static bu_rng rng = { 11 };

static void item_new(item *it, size_t lo, size_t hi)
{
    it->size = (uint32_t)(lo + bu_below(&rng, hi - lo + 1));
    it->ptr = bu_check(malloc(it->size), it->size);
    bu_fill(it->ptr, it->size, (uint8_t)it->size, 0);
}

static void item_free(item *it)
{
    bu_verify(it->ptr, it->size, (uint8_t)it->size, "frag");
    free(it->ptr);
    it->ptr = NULL;
}

static void stage(int round, const char *name, const char *metric)
{
    long rss = bu_rss_kib();
    printf("round %d %-12s VmRSS %7ld KiB\n", round, name, rss);
    if (round == 1)
        bu_metric(metric, (double)rss);
}

static void one_round(int round, item *small, size_t n, item *medium, size_t *n_medium)
{
    for (size_t i = 0; i < n; i++)
        item_new(&small[i], 16, 64);
    stage(round, "small", "rss_small_kib");

    size_t freed = 0;
    for (size_t i = 0; i < n; i += 2) {
        freed += small[i].size;
        item_free(&small[i]);
    }
    stage(round, "holes", "rss_holes_kib");

    size_t m = 0;
    for (size_t got = 0; got < freed; m++) {
        item_new(&medium[m], 256, 2048);
        got += medium[m].size;
    }
    *n_medium = m;
    stage(round, "medium", "rss_medium_kib");

    for (size_t i = 1; i < n; i += 2)
        item_free(&small[i]);
    stage(round, "small freed", "rss_small_freed_kib");

    for (size_t i = 0; i < m; i++)
        item_free(&medium[i]);
    stage(round, "end", "rss_end_kib");
}

int main(int argc, char **argv)
{
    long n = 1000000, rounds = 3;
    int opt;
    while ((opt = getopt(argc, argv, "n:r:")) != -1) {
        switch (opt) {
        case 'n': n = bu_arg_long(optarg, "-n"); break;
        case 'r': rounds = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-n small objects] [-r rounds]\n", argv[0]);
            return 64;
        }
    }
    if (n < 2 || rounds < 1)
        bu_fail("need -n >= 2 and -r >= 1");

    /* Freed small bytes are at most n/2 * 64; medium ones are >= 256 B. */
    item *small = bu_check(calloc((size_t)n, sizeof *small), 1);
    item *medium = bu_check(calloc((size_t)n / 8 + 2, sizeof *medium), 1);
    double t0 = bu_now_s();
    size_t n_medium = 0;
    for (int r = 1; r <= rounds; r++)
        one_round(r, small, (size_t)n, medium, &n_medium);
    double s = bu_now_s() - t0;
    bu_metric("rss_end_last_kib", (double)bu_rss_kib());
    bu_metric("peak_rss_kib", (double)bu_hwm_kib());
    printf("%ld rounds in %.3f s (%zu medium objects per round)\n", rounds, s, n_medium);
    free(medium);
    free(small);
    return 0;
}
