/*
 * w_latency.c - the "latency" seed (seeds/001): the cost of one malloc call,
 * timed with a clock_gettime(CLOCK_MONOTONIC) pair whose own cost is
 * calibrated (median of 200,000 back-to-back pairs) and subtracted.
 *
 * usage: w_latency [-m free|touch] [-c calls per size=1000] [-b batches=11]
 *
 * Sizes 256, 1024, 4096, 5000, 50000, 500000 B, in that order, one process.
 *   free  - each block is freed at once, as in the seed's first program;
 *           also a bulk figure: -c malloc+free pairs timed together, the
 *           median over -b batches, because a single fast malloc is shorter
 *           than the clock's resolution (about 10 ns on a KVM guest).
 *   touch - blocks are kept and one byte per 4 KiB page is written after
 *           the timed call (the seed's "never freed" program: page faults).
 * Minor faults come from getrusage, both in total and "inside malloc"
 * (read just around the timed call, so touching is left out).
 * Negative corrected samples are clamped to 0: "at or below resolution".
 */
#include "bench_util.h"

#define CALIB_PAIRS 200000
#define MAX_CALLS 100000

static const size_t sizes[] = { 256, 1024, 4096, 5000, 50000, 500000 };
#define NSIZES (sizeof sizes / sizeof sizes[0])

/* Static sample buffers: no allocation of our own inside the measurement. */
static uint64_t samples[CALIB_PAIRS];
static void *kept[MAX_CALLS];
static void *volatile sink;

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median_sorted(const uint64_t *v, size_t n)
{
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static uint64_t calibrate_clock(void)
{
    for (size_t i = 0; i < CALIB_PAIRS; i++) {
        uint64_t a = bu_now_ns();
        uint64_t b = bu_now_ns();
        samples[i] = b - a;
    }
    qsort(samples, CALIB_PAIRS, sizeof samples[0], cmp_u64);
    return median_sorted(samples, CALIB_PAIRS);
}

/* -c timed calls of one size; leaves corrected samples in `samples`. */
static void time_calls(size_t size, long calls, int touch, uint64_t overhead,
                       long *faults_inside)
{
    long inside = 0;
    for (long i = 0; i < calls; i++) {
        long f0 = bu_minflt();
        uint64_t t0 = bu_now_ns();
        char *p = malloc(size);
        uint64_t t1 = bu_now_ns();
        inside += bu_minflt() - f0;
        bu_check(p, size);
        uint64_t d = t1 - t0;
        samples[i] = d > overhead ? d - overhead : 0;
        if (touch) {
            for (size_t off = 0; off < size; off += BU_PAGE)
                p[off] = (char)(off / BU_PAGE + 1);
            kept[i] = p;
        } else {
            sink = p;
            free(p);
        }
    }
    *faults_inside = inside;
}

/* Kept blocks must still hold what was written into each page. */
static void verify_kept(size_t size, long calls)
{
    for (long i = 0; i < calls; i++)
        for (size_t off = 0; off < size; off += BU_PAGE)
            if (((char *)kept[i])[off] != (char)(off / BU_PAGE + 1))
                bu_fail("block %p of %zu B lost page %zu", kept[i], size,
                        off / BU_PAGE);
}

/* Median over batches of the per-pair cost of `calls` pairs timed together. */
static double bulk_pair_ns(size_t size, long calls, long batches)
{
    for (long b = 0; b < batches; b++) {
        uint64_t t0 = bu_now_ns();
        for (long i = 0; i < calls; i++) {
            void *p = malloc(size);
            if (__builtin_expect(p == NULL, 0))
                bu_fail("malloc(%zu) returned NULL", size);
            sink = p;
            free(p);
        }
        samples[b] = bu_now_ns() - t0;
    }
    qsort(samples, (size_t)batches, sizeof samples[0], cmp_u64);
    return (double)median_sorted(samples, (size_t)batches) / (double)calls;
}

static void report_size(size_t size, long calls, int touch, long faults_total,
                        long faults_inside)
{
    double sum = 0;
    for (long i = 0; i < calls; i++)
        sum += (double)samples[i];
    qsort(samples, (size_t)calls, sizeof samples[0], cmp_u64);
    double med = (double)median_sorted(samples, (size_t)calls);
    double p99 = (double)samples[(size_t)((double)calls * 0.99)];
    double mean = sum / (double)calls;
    printf("malloc(%zu): median %.0f ns, mean %.1f ns, p99 %.0f ns, "
           "%.3f faults/call (%.3f inside malloc)\n", size, med, mean, p99,
           (double)faults_total / (double)calls,
           (double)faults_inside / (double)calls);

    char name[64];
    snprintf(name, sizeof name, "median_ns_%zu", size);
    bu_metric(name, med);
    snprintf(name, sizeof name, "mean_ns_%zu", size);
    bu_metric(name, mean);
    snprintf(name, sizeof name, "p99_ns_%zu", size);
    bu_metric(name, p99);
    if (touch) {
        snprintf(name, sizeof name, "faults_per_call_%zu", size);
        bu_metric(name, (double)faults_total / (double)calls);
        snprintf(name, sizeof name, "faults_inside_%zu", size);
        bu_metric(name, (double)faults_inside / (double)calls);
    }
}

int main(int argc, char **argv)
{
    long calls = 1000, batches = 11;
    int touch = 0, opt;
    while ((opt = getopt(argc, argv, "m:c:b:")) != -1) {
        switch (opt) {
        case 'm':
            if (strcmp(optarg, "touch") == 0)
                touch = 1;
            else if (strcmp(optarg, "free") != 0)
                bu_fail("-m takes free or touch");
            break;
        case 'c': calls = bu_arg_long(optarg, "-c"); break;
        case 'b': batches = bu_arg_long(optarg, "-b"); break;
        default:
            fprintf(stderr, "usage: %s [-m free|touch] [-c calls] [-b batches]\n",
                    argv[0]);
            return 64;
        }
    }
    if (calls < 1 || calls > MAX_CALLS || batches < 1 || batches > CALIB_PAIRS)
        bu_fail("-c must be 1..%d, -b 1..%d", MAX_CALLS, CALIB_PAIRS);

    uint64_t overhead = calibrate_clock();
    printf("clock_gettime pair: %llu ns (median of %d)\n",
           (unsigned long long)overhead, CALIB_PAIRS);
    bu_metric("clock_pair_ns", (double)overhead);

    for (size_t s = 0; s < NSIZES; s++) {
        long inside, f0 = bu_minflt();
        time_calls(sizes[s], calls, touch, overhead, &inside);
        long total = bu_minflt() - f0;
        report_size(sizes[s], calls, touch, total, inside);
        if (touch)
            verify_kept(sizes[s], calls);
    }
    if (!touch) {
        for (size_t s = 0; s < NSIZES; s++) {
            double ns = bulk_pair_ns(sizes[s], calls, batches);
            printf("bulk malloc+free pair of %zu B: %.1f ns\n", sizes[s], ns);
            char name[64];
            snprintf(name, sizeof name, "bulk_pair_ns_%zu", sizes[s]);
            bu_metric(name, ns);
        }
    }
    return 0;
}
