/*
 * w_threadchurn.c - thread churn (the mleak / glibc-thread shape): many
 * short-lived threads, each allocating a little and exiting, so the cost
 * of creating, caching and tearing down per-thread allocator state
 * dominates, along with how much memory dead threads leave behind.
 *
 * usage: w_threadchurn [-t concurrent threads=2] [-n threads in all=20000]
 *                      [-k allocations per thread=100]
 *
 * Each thread allocates -k blocks of 16..1024 B, checks and frees all but
 * one, and returns that one to main, which checks and frees it: a free
 * from another thread after the allocating thread has gone.
 */
#include "bench_util.h"
#include <pthread.h>

static long per_thread = 100;

static void *worker(void *arg)
{
    bu_rng rng = { (uint64_t)(uintptr_t)arg + 1 };
    uint8_t *blk[256];
    uint32_t size[256];
    for (long i = 0; i < per_thread; i++) {
        size[i] = 16 + (uint32_t)bu_below(&rng, 1009);
        blk[i] = bu_check(malloc(size[i]), size[i]);
        bu_fill(blk[i], size[i], (uint8_t)size[i], 0);
    }
    for (long i = 1; i < per_thread; i++) {
        bu_verify(blk[i], size[i], (uint8_t)size[i], "threadchurn");
        free(blk[i]);
    }
    /* Block 0 survives the thread; main needs its size to check it. */
    bu_verify(blk[0], size[0], (uint8_t)size[0], "threadchurn");
    memcpy(blk[0], &size[0], sizeof size[0]);
    return blk[0];
}

/* The survivor carries its size in its first word (see worker). */
static void eat_survivor(uint8_t *p)
{
    uint32_t size;
    memcpy(&size, p, sizeof size);
    if (size < 16 || size > 1024 || p[size - 1] != (uint8_t)~(uint8_t)size)
        bu_fail("threadchurn: survivor %p lost its pattern", (void *)p);
    free(p);
}

int main(int argc, char **argv)
{
    long conc = 2, total = 20000;
    int opt;
    while ((opt = getopt(argc, argv, "t:n:k:")) != -1) {
        switch (opt) {
        case 't': conc = bu_arg_long(optarg, "-t"); break;
        case 'n': total = bu_arg_long(optarg, "-n"); break;
        case 'k': per_thread = bu_arg_long(optarg, "-k"); break;
        default:
            fprintf(stderr, "usage: %s [-t concurrent] [-n threads] [-k allocs]\n",
                    argv[0]);
            return 64;
        }
    }
    if (conc < 1 || conc > 1024 || per_thread < 1 || per_thread > 256)
        bu_fail("need -t 1..1024 and -k 1..256");

    pthread_t tid[1024];
    double t0 = bu_now_s();
    for (long done = 0; done < total; done += conc) {
        long batch = total - done < conc ? total - done : conc;
        for (long i = 0; i < batch; i++)
            if (pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)(done + i)))
                bu_fail("pthread_create failed");
        for (long i = 0; i < batch; i++) {
            void *survivor;
            pthread_join(tid[i], &survivor);
            eat_survivor(survivor);
        }
    }
    double s = bu_now_s() - t0;
    printf("%ld threads (%ld at a time) in %.3f s\n", total, conc, s);
    bu_metric("us_per_thread", s * 1e6 / (double)total);
    bu_metric("rss_end_kib", (double)bu_rss_kib());
    return 0;
}
