/*
 * w_falseshare.c - false sharing caused by the allocator (the cache-thrash
 * and cache-scratch shapes of the Hoard benchmarks): if two threads get
 * small objects on the same cache line, their writes ping-pong that line.
 *
 * usage: w_falseshare [-m thrash|scratch] [-t threads=2] [-i objects=1000]
 *                     [-r writes per byte=100000] [-s size=8]
 *   thrash  - each thread allocates its own objects one after another and
 *             writes them hard (active false sharing: the allocator itself
 *             places concurrent threads' objects side by side);
 *   scratch - the main thread allocates one object per thread back to back
 *             and hands them over; each thread frees its object and then
 *             allocates and writes its own (passive false sharing: a freed
 *             neighbour's slot is reused by another thread).
 * Every object's bytes are counted up -r times and checked at the end.
 */
#include "bench_util.h"
#include <pthread.h>

static long objects = 1000, writes = 100000;
static size_t size = 8;
static int scratch;

/* Write every byte `writes` times, then check the count survived. */
static void hammer(volatile uint8_t *p)
{
    for (size_t j = 0; j < size; j++)
        p[j] = 0;
    for (long r = 0; r < writes; r++)
        for (size_t j = 0; j < size; j++)
            p[j]++;
    for (size_t j = 0; j < size; j++)
        if (p[j] != (uint8_t)writes)
            bu_fail("falseshare: byte %zu of %p is %u, expected %u", j,
                    (void *)p, p[j], (uint8_t)writes);
}

static void *worker(void *arg)
{
    void *handed = arg;      /* scratch: the object main allocated for us */
    if (handed) {
        hammer(handed);
        free(handed);
    }
    for (long i = 0; i < objects; i++) {
        uint8_t *p = bu_check(malloc(size), size);
        hammer(p);
        free(p);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = 2;
    int opt;
    while ((opt = getopt(argc, argv, "m:t:i:r:s:")) != -1) {
        switch (opt) {
        case 'm':
            if (strcmp(optarg, "scratch") == 0)
                scratch = 1;
            else if (strcmp(optarg, "thrash") != 0)
                bu_fail("-m takes thrash or scratch");
            break;
        case 't': nthreads = bu_arg_long(optarg, "-t"); break;
        case 'i': objects = bu_arg_long(optarg, "-i"); break;
        case 'r': writes = bu_arg_long(optarg, "-r"); break;
        case 's': size = (size_t)bu_arg_long(optarg, "-s"); break;
        default:
            fprintf(stderr, "usage: %s [-m thrash|scratch] [-t threads] "
                    "[-i objects] [-r writes] [-s size]\n", argv[0]);
            return 64;
        }
    }
    if (nthreads < 1 || nthreads > 1024 || size < 1)
        bu_fail("need 1..1024 threads and -s >= 1");

    pthread_t tid[1024];
    void *handed[1024] = { 0 };
    if (scratch)
        for (long i = 0; i < nthreads; i++)
            handed[i] = bu_check(malloc(size), size);
    double t0 = bu_now_s();
    for (long i = 0; i < nthreads; i++)
        if (pthread_create(&tid[i], NULL, worker, handed[i]))
            bu_fail("pthread_create failed");
    for (long i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    double s = bu_now_s() - t0;
    printf("%s: %ld threads x %ld objects x %ld writes in %.3f s\n",
           scratch ? "scratch" : "thrash", nthreads, objects, writes, s);
    bu_metric("ns_per_object", s * 1e9 / (double)(objects * nthreads));
    return 0;
}
