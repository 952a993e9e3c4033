/*
 * w_rssfoot.c - the "rss footprint" seed (seeds/003): memory footprint of
 * a long-running server, where what counts is peak RSS and how much memory
 * goes back to the OS when the working set shrinks.
 *
 * usage: w_rssfoot [-n live objects=100000] [-o replacements=20000000]
 *                  [-c cycles=3] [-s idle sleep seconds=2] [-r seed=1]
 *
 * -n slots hold objects of log-uniform size 16..4096 B, each fully memset
 * when allocated. A replacement frees one slot's object and allocates a new
 * one; 90% hit the hot tenth of the slots (short lifetimes), 10% any slot
 * (long lifetimes). Each of the -c cycles has:
 *   steady - 80% of the cycle's replacements over all -n slots;
 *   shrink - all but a random 10% of the objects are freed;
 *   low    - 20% of the cycle's replacements among the survivors;
 *   regrow - back to -n objects (all cycles but the last).
 * VmRSS is printed after each phase; at the end the program sleeps -s
 * seconds and does 10,000 more replacements ("idle"), giving allocators
 * that release memory on a timer the chance to do so.
 * The runner's time for this workload is the churn alone (bench_time_s),
 * without the idle sleep.
 */
#include "bench_util.h"

typedef struct {
    uint8_t *ptr;
    uint32_t size;
    uint8_t tag;
} slot;

static slot *slots;
static size_t live;          /* slots [0, live) hold objects */
static size_t live_bytes;
static bu_rng rng = { 1 };

static void slot_fill(slot *s)
{
    s->size = (uint32_t)bu_log_size(&rng, 16, 4096);
    s->tag = (uint8_t)bu_next(&rng);
    s->ptr = bu_check(malloc(s->size), s->size);
    memset(s->ptr, s->tag, s->size);
    s->ptr[s->size - 1] = (uint8_t)~s->tag;
    live_bytes += s->size;
}

static void slot_free(slot *s)
{
    bu_verify(s->ptr, s->size, s->tag, "rssfoot");
    if (s->ptr[s->size / 2] != s->tag && s->size > 2)
        bu_fail("rssfoot: middle of block %p overwritten", (void *)s->ptr);
    free(s->ptr);
    live_bytes -= s->size;
    s->ptr = NULL;
}

/* `ops` replacements among the first `live` slots, hot tenth favoured. */
static void churn(long ops)
{
    size_t hot = live / 10 ? live / 10 : 1;
    for (long i = 0; i < ops; i++) {
        uint64_t r = bu_next(&rng);
        size_t k = (r & 1023) < 922 ? (r >> 10) % hot : (r >> 10) % live;
        slot_free(&slots[k]);
        slot_fill(&slots[k]);
    }
}

/* Keep a random 10% of the objects, compacted into the first slots. */
static void shrink(void)
{
    size_t keep = live / 10;
    for (size_t i = 0; i < keep; i++) {
        size_t j = i + (size_t)bu_below(&rng, live - i);
        slot t = slots[i];
        slots[i] = slots[j];
        slots[j] = t;
    }
    for (size_t i = keep; i < live; i++)
        slot_free(&slots[i]);
    live = keep;
}

static void regrow(size_t n)
{
    for (; live < n; live++)
        slot_fill(&slots[live]);
}

static void phase_report(int cycle, const char *phase)
{
    printf("cycle %d %-7s VmRSS %7ld KiB, live %7zu KiB in %zu objects\n",
           cycle, phase, bu_rss_kib(), live_bytes / 1024, live);
}

/* Readings taken at the end of the last cycle's phases. */
typedef struct {
    long rss_full, rss_shrunk;
    size_t bytes_full, bytes_shrunk;
} readings;

static readings run_cycles(size_t n, long cycles, long ops)
{
    readings r = { 0 };
    long per_cycle = ops / cycles;
    regrow(n);
    for (int c = 1; c <= cycles; c++) {
        churn(per_cycle * 8 / 10);
        phase_report(c, "steady");
        r.rss_full = bu_rss_kib();
        r.bytes_full = live_bytes;
        shrink();
        phase_report(c, "shrunk");
        r.rss_shrunk = bu_rss_kib();
        r.bytes_shrunk = live_bytes;
        churn(per_cycle * 2 / 10);
        phase_report(c, "low");
        if (c < cycles) {
            regrow(n);
            phase_report(c, "regrown");
        }
    }
    return r;
}

int main(int argc, char **argv)
{
    long n = 100000, ops = 20000000, cycles = 3, seed = 1;
    double idle_s = 2;
    int opt;
    while ((opt = getopt(argc, argv, "n:o:c:s:r:")) != -1) {
        switch (opt) {
        case 'n': n = bu_arg_long(optarg, "-n"); break;
        case 'o': ops = bu_arg_long(optarg, "-o"); break;
        case 'c': cycles = bu_arg_long(optarg, "-c"); break;
        case 's': idle_s = strtod(optarg, NULL); break;
        case 'r': seed = bu_arg_long(optarg, "-r"); break;
        default:
            fprintf(stderr, "usage: %s [-n objects] [-o replacements] "
                    "[-c cycles] [-s idle s] [-r seed]\n", argv[0]);
            return 64;
        }
    }
    if (n < 10 || cycles < 1)
        bu_fail("need -n >= 10 and -c >= 1");
    rng.s = (uint64_t)seed;
    slots = bu_check(calloc((size_t)n, sizeof *slots), 1);

    double t0 = bu_now_s();
    readings r = run_cycles((size_t)n, cycles, ops);
    double churn_s = bu_now_s() - t0;
    long rss_final = bu_rss_kib();
    long rss_final_lazy = bu_rss_minus_lazyfree_kib();

    bu_sleep_s(idle_s);
    churn(10000);
    long rss_idle = bu_rss_kib();
    printf("idle (%.1f s + 10k ops): VmRSS %ld KiB\n", idle_s, rss_idle);

    bu_metric("live_kib_full", (double)r.bytes_full / 1024);
    bu_metric("peak_rss_kib", (double)bu_hwm_kib());
    bu_metric("rss_full_kib", (double)r.rss_full);
    bu_metric("rss_after_shrink_kib", (double)r.rss_shrunk);
    bu_metric("live_kib_after_shrink", (double)r.bytes_shrunk / 1024);
    bu_metric("final_rss_kib", (double)rss_final);
    if (rss_final_lazy >= 0)
        bu_metric("final_rss_minus_lazyfree_kib", (double)rss_final_lazy);
    bu_metric("idle_rss_kib", (double)rss_idle);
    bu_metric("churn_s", churn_s);
    bu_metric("bench_time_s", churn_s);

    for (size_t i = 0; i < live; i++)
        slot_free(&slots[i]);
    free(slots);
    return 0;
}
