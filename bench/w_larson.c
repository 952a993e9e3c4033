/*
 * w_larson.c - a larson-like server simulation: worker threads keep
 * replacing random objects in one shared pool, so most frees hit blocks
 * another thread allocated, and the workers are replaced by fresh threads
 * every round, as server threads come and go.
 *
 * usage: w_larson [-t threads=2] [-s seconds=1] [-r rounds=5]
 *                 [-p pool slots per thread=5000] [-z max size=1000]
 *
 * A replacement allocates 8..-z bytes, stamps the block, publishes it with
 * an atomic exchange into a random pool slot and frees what it got back
 * after checking its stamp. The run lasts -s seconds; the result is a
 * throughput, which is turned into a time the runner can compare
 * (bench_time_s = seconds per 10 million replacements at that rate), the
 * way mimalloc-bench treats its fixed-duration benchmarks.
 */
#include "bench_util.h"
#include <pthread.h>
#include <stdatomic.h>

#define REF_OPS 1e7

typedef struct {
    uint32_t size, check;
} stamp;

static _Atomic(stamp *) *pool;
static size_t pool_n, max_size = 1000;
static atomic_int stop;
static atomic_long total_ops;

static stamp *make_block(bu_rng *rng)
{
    size_t size = 8 + (size_t)bu_below(rng, max_size - 7);
    stamp *b = bu_check(malloc(size), size);
    b->size = (uint32_t)size;
    b->check = (uint32_t)size * 2654435761u;
    return b;
}

static void drop_block(stamp *b)
{
    if (b == NULL)
        return;
    if (b->size < 8 || b->size > max_size || b->check != b->size * 2654435761u)
        bu_fail("larson: block %p corrupted", (void *)b);
    free(b);
}

static void *worker(void *arg)
{
    bu_rng rng = { (uint64_t)(uintptr_t)arg * 7919 + 1 };
    long ops = 0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int i = 0; i < 64; i++) {
            stamp *b = make_block(&rng);
            size_t k = (size_t)bu_below(&rng, pool_n);
            drop_block(atomic_exchange(&pool[k], b));
        }
        ops += 64;
    }
    atomic_fetch_add(&total_ops, ops);
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = 2, rounds = 5, per_thread = 5000;
    double seconds = 1;
    int opt;
    while ((opt = getopt(argc, argv, "t:s:r:p:z:")) != -1) {
        switch (opt) {
        case 't': nthreads = bu_arg_long(optarg, "-t"); break;
        case 's': seconds = strtod(optarg, NULL); break;
        case 'r': rounds = bu_arg_long(optarg, "-r"); break;
        case 'p': per_thread = bu_arg_long(optarg, "-p"); break;
        case 'z': max_size = (size_t)bu_arg_long(optarg, "-z"); break;
        default:
            fprintf(stderr, "usage: %s [-t threads] [-s seconds] [-r rounds] "
                    "[-p slots per thread] [-z max size]\n", argv[0]);
            return 64;
        }
    }
    if (nthreads < 1 || nthreads > 1024 || rounds < 1 || per_thread < 1 ||
        max_size < 8 || seconds <= 0)
        bu_fail("bad arguments");
    pool_n = (size_t)(per_thread * nthreads);
    pool = bu_check(calloc(pool_n, sizeof *pool), 1);
    bu_rng rng = { 42 };
    for (size_t k = 0; k < pool_n; k++)
        atomic_init(&pool[k], make_block(&rng));

    pthread_t tid[1024];
    double t0 = bu_now_s();
    for (long r = 0; r < rounds; r++) {
        atomic_store(&stop, 0);
        for (long i = 0; i < nthreads; i++)
            if (pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)(r * nthreads + i)))
                bu_fail("pthread_create failed");
        bu_sleep_s(seconds / (double)rounds);
        atomic_store(&stop, 1);
        for (long i = 0; i < nthreads; i++)
            pthread_join(tid[i], NULL);
    }
    double s = bu_now_s() - t0;
    for (size_t k = 0; k < pool_n; k++)
        drop_block(atomic_load(&pool[k]));
    free(pool);

    double rate = (double)atomic_load(&total_ops) / s;
    printf("%ld threads, %ld rounds: %.0f replacements/s\n", nthreads, rounds, rate);
    bu_metric("ops_per_s", rate);
    bu_metric("bench_time_s", REF_OPS / rate);
    return 0;
}
