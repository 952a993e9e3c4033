/*
 * w_mstress.c - mixed-size multi-threaded stress with random lifetimes
 * (the mstress shape): threads allocate, free, hand objects to each other
 * through a shared transfer table and now and then drop everything they
 * hold, over sizes from 16 B to 1 MiB.
 *
 * usage: w_mstress [-t threads=2] [-n steps per thread and round=200000]
 *                  [-r rounds=5]
 *
 * Sizes: 90% log-uniform 16 B..1 KiB, 9% 1..64 KiB, 1% 64 KiB..1 MiB.
 * A step: 50% allocate, 35% free a random held object, 15% swap a held
 * object with a random transfer slot (so it is freed by another thread,
 * maybe in a later round); one step in 1000 frees all held objects at once. Threads exit at the end of each round and new ones
 * start, so thread-exit paths see live and transferred objects.
 * Each object carries its size and a check word (and, past that, a mark in
 * its last byte), checked before it is freed.
 */
#include "bench_util.h"
#include <pthread.h>
#include <stdatomic.h>

#define TRANSFER 1024
#define HOLD_MAX 4096

typedef struct {
    uint64_t size, check;
} obj;

static _Atomic(obj *) transfer[TRANSFER];
static long steps = 200000;

static uint64_t check_word(const obj *o)
{
    return o->size * 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)o;
}

static obj *obj_new(bu_rng *rng)
{
    uint64_t r = bu_below(rng, 100);
    size_t size = r < 90 ? bu_log_size(rng, 16, 1024)
                : r < 99 ? bu_log_size(rng, 1024, 65536)
                : bu_log_size(rng, 65536, 1 << 20);
    obj *o = bu_check(malloc(size), size);
    o->size = size;
    o->check = check_word(o);
    if (size > sizeof(obj))      /* a 16-byte object is all header */
        ((uint8_t *)o)[size - 1] = (uint8_t)size;
    return o;
}

static void obj_free(obj *o)
{
    if (o == NULL)
        return;
    if (o->check != check_word(o) ||
        (o->size > sizeof(obj) && ((uint8_t *)o)[o->size - 1] != (uint8_t)o->size))
        bu_fail("mstress: object %p corrupted", (void *)o);
    free(o);
}

static void *worker(void *arg)
{
    bu_rng rng = { (uint64_t)(uintptr_t)arg * 104729 + 3 };
    obj *held[HOLD_MAX];
    size_t n = 0;
    for (long s = 0; s < steps; s++) {
        uint64_t r = bu_below(&rng, 1000);
        if (r == 0) {                            /* lifetimes end together */
            while (n)
                obj_free(held[--n]);
        } else if (r < 500 && n < HOLD_MAX) {
            held[n++] = obj_new(&rng);
        } else if (r < 850 && n > 0) {
            size_t k = (size_t)bu_below(&rng, n);
            obj_free(held[k]);
            held[k] = held[--n];
        } else if (n > 0) {                      /* give one, take one */
            size_t k = (size_t)bu_below(&rng, n);
            obj *got = atomic_exchange(&transfer[bu_below(&rng, TRANSFER)], held[k]);
            if (got)
                held[k] = got;
            else
                held[k] = held[--n];
        }
    }
    while (n)
        obj_free(held[--n]);
    return NULL;
}

int main(int argc, char **argv)
{
    long nthreads = 2, rounds = 5;
    int opt;
    while ((opt = getopt(argc, argv, "t:n:r:")) != -1) {
        switch (opt) {
        case 't': nthreads = bu_arg_long(optarg, "-t"); break;
        case 'n': steps = bu_arg_long(optarg, "-n"); break;
        case 'r': rounds = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-t threads] [-n steps] [-r rounds]\n",
                    argv[0]);
            return 64;
        }
    }
    if (nthreads < 1 || nthreads > 1024)
        bu_fail("need 1..1024 threads");

    pthread_t tid[1024];
    double t0 = bu_now_s();
    for (long r = 0; r < rounds; r++) {
        for (long i = 0; i < nthreads; i++)
            if (pthread_create(&tid[i], NULL, worker, (void *)(uintptr_t)(r * nthreads + i)))
                bu_fail("pthread_create failed");
        for (long i = 0; i < nthreads; i++)
            pthread_join(tid[i], NULL);
    }
    for (int k = 0; k < TRANSFER; k++)
        obj_free(atomic_exchange(&transfer[k], NULL));
    double s = bu_now_s() - t0;
    printf("%ld threads x %ld rounds x %ld steps in %.3f s\n", nthreads, rounds,
           steps, s);
    bu_metric("ns_per_step", s * 1e9 / (double)(nthreads * rounds * steps));
    return 0;
}
