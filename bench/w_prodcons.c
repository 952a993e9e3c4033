/*
 * w_prodcons.c - producer/consumer: every block is freed by a thread other
 * than the one that allocated it (the xmalloc-test / message-passing shape).
 *
 * usage: w_prodcons [-t threads=2] [-n blocks per thread=2000000]
 *                   [-s max size=512]
 *
 * The threads form a ring: thread i allocates blocks (17..-s bytes), stamps
 * them with its id and a sequence number and passes them in batches to
 * thread i+1, which checks and frees them. Each link is a single-producer
 * single-consumer ring of batches, so the hand-over costs two atomic
 * operations per 64 blocks and the allocator's remote-free path dominates.
 * With -t 1 the thread passes blocks to itself (no remote frees).
 *
 * How far a producer runs ahead is up to the scheduler, not the allocator:
 * a link holds 0 to RING batches (up to about 4 MiB of blocks), and the
 * peak RSS follows the backlogs: each heap's high-water mark is about
 * its link's deepest backlog. The program reports the most batches any
 * link held (max_backlog_batches) and those maxima summed over the links
 * (backlog_batches_sum), so a reader can tell an allocator's overhead
 * from a run where a thread fell behind.
 */
#include "bench_util.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define BATCH 64
#define RING 256             /* batches in flight per link: bounds memory */

typedef struct {
    uint32_t from, size;
    uint64_t seq;
} header;

typedef struct {
    header *blk[BATCH];
} batch;

typedef struct {
    _Alignas(64) atomic_size_t head;     /* next batch to read */
    _Alignas(64) atomic_size_t tail;     /* next batch to write */
    batch slots[RING];
} chan;

static chan *chans;          /* link i carries thread i's blocks to i+1 */
static size_t *backlog;      /* backlog[i]: the most batches link i held */
static long per_thread, nthreads;
static size_t max_size = 512;

/* Only link l's producer calls this; *deepest is its own record. */
static int chan_put(chan *l, const batch *b, size_t *deepest)
{
    size_t t = atomic_load_explicit(&l->tail, memory_order_relaxed);
    size_t held = t - atomic_load_explicit(&l->head, memory_order_acquire);
    if (held == RING)
        return 0;
    if (held + 1 > *deepest)
        *deepest = held + 1;
    l->slots[t % RING] = *b;
    atomic_store_explicit(&l->tail, t + 1, memory_order_release);
    return 1;
}

static int chan_take(chan *l, batch *b)
{
    size_t h = atomic_load_explicit(&l->head, memory_order_relaxed);
    if (h == atomic_load_explicit(&l->tail, memory_order_acquire))
        return 0;
    *b = l->slots[h % RING];
    atomic_store_explicit(&l->head, h + 1, memory_order_release);
    return 1;
}

static void make_batch(batch *b, uint32_t me, uint64_t *seq, bu_rng *rng)
{
    for (int i = 0; i < BATCH; i++) {
        size_t size = 17 + (size_t)bu_below(rng, max_size - 16);
        header *h = bu_check(malloc(size), size);
        h->from = me;
        h->size = (uint32_t)size;
        h->seq = (*seq)++;
        ((uint8_t *)h)[size - 1] = (uint8_t)h->seq;
        b->blk[i] = h;
    }
}

/* Blocks from one producer arrive in order; anything else is corruption. */
static void eat_batch(const batch *b, uint32_t from, uint64_t *seq)
{
    for (int i = 0; i < BATCH; i++) {
        header *h = b->blk[i];
        if (h->from != from || h->seq != *seq || h->size <= sizeof(header) ||
            h->size > max_size || ((uint8_t *)h)[h->size - 1] != (uint8_t)h->seq)
            bu_fail("prodcons: block %p from thread %u corrupted", (void *)h, from);
        (*seq)++;
        free(h);
    }
}

static void *worker(void *arg)
{
    uint32_t me = (uint32_t)(uintptr_t)arg;
    uint32_t prev = (uint32_t)((me + nthreads - 1) % nthreads);
    chan *out = &chans[me], *in = &chans[prev];
    bu_rng rng = { me + 1 };
    long batches = per_thread / BATCH, sent = 0, got = 0;
    uint64_t seq_out = 0, seq_in = 0;
    batch b, pending;
    int have_pending = 0;
    size_t deepest = 0;

    while (sent < batches || got < batches) {
        int progress = 0;
        if (sent < batches) {
            if (!have_pending) {
                make_batch(&pending, me, &seq_out, &rng);
                have_pending = 1;
            }
            if (chan_put(out, &pending, &deepest)) {
                have_pending = 0;
                sent++;
                progress = 1;
            }
        }
        while (got < batches && chan_take(in, &b)) {
            eat_batch(&b, prev, &seq_in);
            got++;
            progress = 1;
        }
        if (!progress)
            sched_yield();
    }
    backlog[me] = deepest;
    return NULL;
}

int main(int argc, char **argv)
{
    nthreads = 2;
    per_thread = 2000000;
    int opt;
    while ((opt = getopt(argc, argv, "t:n:s:")) != -1) {
        switch (opt) {
        case 't': nthreads = bu_arg_long(optarg, "-t"); break;
        case 'n': per_thread = bu_arg_long(optarg, "-n"); break;
        case 's': max_size = (size_t)bu_arg_long(optarg, "-s"); break;
        default:
            fprintf(stderr, "usage: %s [-t threads] [-n blocks] [-s max size]\n",
                    argv[0]);
            return 64;
        }
    }
    if (nthreads < 1 || nthreads > 1024 || max_size < 17)
        bu_fail("need 1..1024 threads and -s >= 17");
    chans = bu_check(aligned_alloc(64, sizeof(chan) * (size_t)nthreads), 64);
    backlog = bu_check(calloc((size_t)nthreads, sizeof *backlog), sizeof *backlog);
    for (long i = 0; i < nthreads; i++) {
        atomic_init(&chans[i].head, 0);
        atomic_init(&chans[i].tail, 0);
    }

    double t0 = bu_now_s();
    bu_run_threads(nthreads, worker);
    double s = bu_now_s() - t0;
    long blocks = per_thread / BATCH * BATCH * nthreads;
    printf("%ld blocks passed between %ld threads in %.3f s\n", blocks, nthreads, s);
    bu_metric("ns_per_block", s * 1e9 / (double)blocks);
    size_t deepest = 0, sum = 0;
    for (long i = 0; i < nthreads; i++) {
        deepest = backlog[i] > deepest ? backlog[i] : deepest;
        sum += backlog[i];
    }
    bu_metric("max_backlog_batches", (double)deepest);
    bu_metric("backlog_batches_sum", (double)sum);
    free(backlog);
    free(chans);
    return 0;
}
