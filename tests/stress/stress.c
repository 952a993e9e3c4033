/*
 * stress.c - a multi-threaded torture test for a malloc implementation.
 *
 *   stress -t THREADS -s SECONDS -S SEED [knobs, see usage()]
 *
 * It links with nothing special and is run under LD_PRELOAD (or without,
 * against glibc, to show the program itself raises no false alarms).
 *
 * What it checks, and why:
 *   - Every block is filled over its whole length (its usable size, when
 *     -u 1) with a stream derived from its address, its requested size and
 *     the seed, and verified in full before every free and realloc. Two
 *     blocks that overlap, a block handed out twice, or an allocator that
 *     writes into live memory (free-list links, metadata, purging a page
 *     still in use) all break some block's stream.
 *   - realloc keeps the prefix: the old block is verified, and after the
 *     call the kept prefix must still hold the OLD stream; then the block
 *     is rewritten with the stream of its new address and size.
 *   - calloc memory is zero; aligned calls are aligned; plain calls are
 *     aligned for any object of their size; malloc_usable_size covers the
 *     request; a NULL is an error unless errno is ENOMEM (counted, shown in
 *     the summary). Impossible requests must fail with ENOMEM.
 *   - Remote frees and reallocs: blocks live in one shared table of slots
 *     (a spinlock per slot, taken with a try-lock only, so nothing ever
 *     waits), so a block is often freed or resized by a thread other than
 *     the one that allocated it.
 *   - Thread exit: workers live 50..500 ms each (-l/-L) and leave their
 *     blocks behind for others; the main thread replaces them, so heaps are
 *     parked and adopted all the time.
 *   - If the allocator exports tally_check (found with dlsym, so the program
 *     runs without tally), the main thread calls it every -c ms and fails
 *     when it reports a problem; it also calls malloc_trim(0) every -m ms.
 *   - A watchdog thread aborts (so a debugger stops there) when no
 *     operation completes for -w seconds: a deadlock.
 *
 * A failure prints one line to stderr (block, size, operation, what was
 * wrong) and exits with status 1 from fail(): `break fail` in gdb. At the
 * end everything left is verified and freed and a summary is printed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)
#define MAX_THREADS 256

/* ---- options ------------------------------------------------------------ */

static struct {
    int threads;             /* -t: workers kept alive */
    int seconds;             /* -s: run time */
    uint64_t seed;           /* -S */
    size_t slots;            /* -n: shared table size */
    size_t live_cap;         /* -M MiB: big requests are skipped above it */
    size_t max_size;         /* -x: larger requests become small ones */
    int life_min, life_max;  /* -l, -L: worker lifetime in ms */
    int check_ms;            /* -c: tally_check period, 0 = never */
    int trim_ms;             /* -m: malloc_trim period, 0 = never */
    int use_usable;          /* -u: fill up to malloc_usable_size */
    int watchdog_s;          /* -w: seconds without progress = hang */
} opt = { 2, 10, 0, 4096, 512 * MIB, 64 * MIB, 50, 500, 100, 1000, 1, 60 };

/* ---- shared state ------------------------------------------------------- */

enum kind { K_MALLOC, K_CALLOC, K_MEMALIGN, K_ALIGNED, K_REALLOC };
static const char *const kind_name[] = { "malloc", "calloc", "posix_memalign",
                                         "aligned_alloc", "realloc" };

/* One live block. `len` is the length the pattern covers (>= size). */
struct slot {
    atomic_int lock;
    unsigned owner;          /* generation of the allocating thread */
    void *p;
    size_t size, len, align;
    enum kind kind;
};

static struct slot *table;
static atomic_size_t live_bytes;
static atomic_uint_fast64_t progress;   /* ops done, read by the watchdog */
static atomic_int stop;
static atomic_uint generation;
static atomic_uint_fast64_t ops_total, remote_total, enomem_total, bytes_total;

struct worker {
    pthread_t tid;
    int index;               /* its stripe of the table */
    atomic_int done;
};
static struct worker workers[MAX_THREADS];

/* Per-thread state: random stream and counters. */
struct ctx {
    uint64_t rng;
    unsigned gen;
    int index;
    uint64_t ops, remote, enomem, bytes;
};

/* ---- failure ------------------------------------------------------------- */

/* The one error sink: one line, then exit 1 without running atexit
 * handlers (other threads are still running). */
__attribute__((noinline, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n > (int)sizeof line - 2)
        n = (int)sizeof line - 2;
    line[n++] = '\n';
    if (write(2, "stress: FAIL ", 13) < 0 || write(2, line, (size_t)n) < 0)
        _exit(1);
    _exit(1);
}

/* ---- random numbers -------------------------------------------------------- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

static uint64_t xorshift64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

static uint64_t rnd(struct ctx *c, uint64_t n)   /* 0..n-1 */
{
    return n ? xorshift64(&c->rng) % n : 0;
}

static size_t rnd_range(struct ctx *c, size_t lo, size_t hi)   /* lo..hi */
{
    return lo + (size_t)rnd(c, hi - lo + 1);
}

/* Skewed sizes: mostly small, some medium, a few to 1 MiB, rarely to 64
 * MiB; one in 16 sits on a power-of-two or mmap-threshold boundary, where
 * size classes change. */
static size_t rnd_size(struct ctx *c)
{
    uint64_t r = rnd(c, 10000);
    if (r < 625) {
        size_t b = (size_t)1 << rnd_range(c, 4, 20);
        return b + (size_t)rnd_range(c, 0, 2) - 1;
    }
    if (r < 8000)
        return rnd_range(c, 1, 256);
    if (r < 9750)
        return rnd_range(c, 257, 64 * KIB);
    if (r < 9997)
        return rnd_range(c, 64 * KIB + 1, MIB);
    return rnd_range(c, MIB + 1, 64 * MIB);
}

/* A request above -x, or a big one that would take live memory over the
 * cap, becomes small. */
static size_t bounded(struct ctx *c, size_t size, size_t old)
{
    if (size > opt.max_size)
        return rnd_range(c, 1, opt.max_size < 256 ? opt.max_size : 256);
    if (size <= 64 * KIB || size <= old)
        return size;
    if (atomic_load(&live_bytes) + size - old > opt.live_cap)
        return rnd_range(c, 1, 256);
    return size;
}

static size_t rnd_align(struct ctx *c)   /* 16 .. 64 KiB */
{
    return (size_t)1 << rnd_range(c, 4, 16);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

/* ---- the pattern ----------------------------------------------------------- */

static uint64_t pattern_key(const void *p, size_t size)
{
    uint64_t k = splitmix64((uint64_t)(uintptr_t)p ^ opt.seed ^ (size * 0x2545f4914f6cdd1dULL));
    return k ? k : 1;
}

/* Writes the first `len` bytes of the stream keyed by (p, size). */
static void pattern_fill(void *p, size_t size, size_t len)
{
    uint64_t s = pattern_key(p, size), v;
    unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        v = xorshift64(&s);
        memcpy(b + i, &v, 8);
    }
    if (i < len) {
        v = xorshift64(&s);
        memcpy(b + i, &v, len - i);
    }
}

/* Offset of the first of `len` bytes at q that differs from the stream
 * keyed by (p, size), or -1. q is p, or where realloc moved p's contents. */
static ptrdiff_t pattern_find_bad(const void *q, const void *p, size_t size, size_t len)
{
    uint64_t s = pattern_key(p, size), v, w;
    const unsigned char *b = q;
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        v = xorshift64(&s);
        memcpy(&w, b + i, 8);
        if (v != w)
            break;
    }
    if (i >= len)
        return -1;
    v = i + 8 <= len ? v : xorshift64(&s);
    for (size_t j = 0; j < 8 && i + j < len; j++)
        if (b[i + j] != (unsigned char)(v >> (8 * j)))
            return (ptrdiff_t)(i + j);
    return -1;
}

static void verify(const struct slot *s, const void *q, size_t len, const char *op)
{
    ptrdiff_t bad = pattern_find_bad(q, s->p, s->size, len);
    if (bad >= 0)
        fail("%s: block %p size %zu (from %s, %s) corrupt at offset %td of %zu "
             "(byte 0x%02x, seed %" PRIu64 ")", op, q, s->size, kind_name[s->kind],
             q == s->p ? "in place" : "moved", bad, len,
             ((const unsigned char *)q)[bad], opt.seed);
}

static void verify_zero(const void *p, size_t size)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < size; i++)
        if (b[i])
            fail("calloc: block %p size %zu not zero at offset %zu (0x%02x)", p, size, i, b[i]);
}

/* ---- allocation ------------------------------------------------------------ */

/* The alignment any object of `size` bytes may need. */
static size_t natural_align(size_t size)
{
    size_t a = 16;
    while (a > 1 && a > size)
        a >>= 1;
    return a;
}

/* Checks a fresh (or reallocated) block and records it in the slot. */
static void accept(struct ctx *c, struct slot *s, void *p, size_t size, size_t align,
                   enum kind kind)
{
    size_t need = align ? align : natural_align(size);
    if ((uintptr_t)p % need)
        fail("%s: block %p size %zu misaligned (want %zu)", kind_name[kind], p, size, need);
    size_t usable = malloc_usable_size(p);
    if (usable < size)
        fail("%s: block %p size %zu has malloc_usable_size %zu", kind_name[kind], p, size,
             usable);
    if (kind == K_CALLOC)
        verify_zero(p, size);
    s->p = p;
    s->size = size;
    s->len = opt.use_usable ? usable : size;
    s->align = align;
    s->kind = kind;
    s->owner = c->gen;
    pattern_fill(p, size, s->len);
    atomic_fetch_add(&live_bytes, size);
    c->bytes += size;
}

/* NULL is acceptable only as ENOMEM; returns 1 when it was. */
static int null_ok(struct ctx *c, const char *op, size_t size, int err)
{
    if (err != ENOMEM)
        fail("%s: size %zu returned NULL with errno %d", op, size, err);
    c->enomem++;
    return 1;
}

static void slot_alloc(struct ctx *c, struct slot *s)
{
    size_t size = bounded(c, rnd_size(c), 0), align = 0;
    enum kind kind = (enum kind)rnd(c, 5);
    void *p = NULL;
    int err;

    errno = 0;
    switch (kind) {
    case K_MALLOC:
        p = malloc(size);
        break;
    case K_CALLOC: {
        size_t n = size % 7 == 0 ? 7 : 1;
        p = calloc(n, size / n);
        size = n * (size / n);
        break;
    }
    case K_MEMALIGN:
        align = rnd_align(c);
        err = posix_memalign(&p, align, size);
        if (err) {
            null_ok(c, "posix_memalign", size, err);
            return;
        }
        break;
    case K_ALIGNED:
        align = rnd_align(c);
        p = aligned_alloc(align, size);
        break;
    case K_REALLOC:
        p = realloc(NULL, size);
        break;
    }
    if (!p && null_ok(c, kind_name[kind], size, errno))
        return;
    accept(c, s, p, size, align, kind);
}

static void slot_free(struct ctx *c, struct slot *s)
{
    verify(s, s->p, s->len, "free");
    if (s->owner != c->gen)
        c->remote++;
    atomic_fetch_sub(&live_bytes, s->size);
    free(s->p);
    s->p = NULL;
}

/* New size for realloc: a fresh size, a small step (same class or the
 * next), or double/half. */
static size_t realloc_size(struct ctx *c, size_t old)
{
    switch (rnd(c, 4)) {
    case 0:
        return old + rnd_range(c, 1, 64);
    case 1:
        return old > 64 ? old - rnd_range(c, 1, 63) : old + 1;
    case 2:
        return rnd(c, 2) || old < 2 ? old * 2 : old / 2;
    default:
        return rnd_size(c);
    }
}

static void slot_realloc(struct ctx *c, struct slot *s)
{
    size_t size = bounded(c, realloc_size(c, s->size), s->size);
    size_t keep = size < s->size ? size : s->size;
    verify(s, s->p, s->len, "realloc (before)");
    errno = 0;
    void *q = realloc(s->p, size);
    if (!q) {
        null_ok(c, "realloc", size, errno);
        verify(s, s->p, s->len, "realloc (failed, old block)");
        return;
    }
    verify(s, q, keep, "realloc (kept prefix)");
    if (s->owner != c->gen)
        c->remote++;
    atomic_fetch_sub(&live_bytes, s->size);
    accept(c, s, q, size, 0, K_REALLOC);
}

/* ---- operations --------------------------------------------------------- */

static struct slot *slot_try_lock(struct ctx *c)
{
    size_t per = opt.slots / (size_t)opt.threads, i;
    if (rnd(c, 2) && per)
        i = (size_t)c->index * per + (size_t)rnd(c, per);
    else
        i = (size_t)rnd(c, opt.slots);
    struct slot *s = &table[i];
    if (atomic_exchange_explicit(&s->lock, 1, memory_order_acquire))
        return NULL;
    return s;
}

static void slot_unlock(struct slot *s)
{
    atomic_store_explicit(&s->lock, 0, memory_order_release);
}

/* A local burst: allocate a handful, check them, free them in a shuffled
 * order. Exercises the owner's fast paths and page turnover. */
static void burst(struct ctx *c)
{
    struct slot b[32];
    int n = (int)rnd_range(c, 1, 32);
    for (int i = 0; i < n; i++) {
        size_t size = rnd(c, 8) ? rnd_range(c, 1, 512) : rnd_range(c, 513, 16 * KIB);
        errno = 0;
        void *p = malloc(size);
        if (!p && null_ok(c, "malloc", size, errno)) {
            n = i;
            break;
        }
        accept(c, &b[i], p, size, 0, K_MALLOC);
    }
    for (int i = n - 1; i > 0; i--) {
        int j = (int)rnd(c, (uint64_t)i + 1);
        struct slot t = b[i];
        b[i] = b[j];
        b[j] = t;
    }
    for (int i = 0; i < n; i++) {
        verify(&b[i], b[i].p, b[i].len, "free (burst)");
        atomic_fetch_sub(&live_bytes, b[i].size);
        free(b[i].p);
    }
}

/* Requests that cannot succeed must fail cleanly with ENOMEM. Volatile,
 * so the compiler neither warns about nor reasons with the sizes. */
static volatile size_t huge = SIZE_MAX - 4096, huge_n = SIZE_MAX / 8;

static void impossible(void)
{
    size_t n = huge, k = huge_n;
    errno = 0;
    void *p = malloc(n);
    if (p || errno != ENOMEM)
        fail("malloc: size %zu gave %p errno %d, want NULL/ENOMEM", n, p, errno);
    errno = 0;
    p = calloc(k, 16);
    if (p || errno != ENOMEM)
        fail("calloc: %zu x 16 (overflow) gave %p errno %d, want NULL/ENOMEM", k, p, errno);
}

static void one_op(struct ctx *c)
{
    uint64_t r = rnd(c, 1000);
    if (r < 40) {
        burst(c);
    } else if (r < 41) {
        impossible();
    } else {
        struct slot *s = slot_try_lock(c);
        if (!s)
            return;
        if (!s->p)
            slot_alloc(c, s);
        else if (r < 600)
            slot_free(c, s);
        else if (r < 950)
            slot_realloc(c, s);
        else
            verify(s, s->p, s->len, "verify");
        slot_unlock(s);
    }
    c->ops++;
    atomic_fetch_add_explicit(&progress, 1, memory_order_relaxed);
}

/* ---- threads ------------------------------------------------------------ */

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct ctx c = { .gen = atomic_fetch_add(&generation, 1) + 1, .index = w->index };
    c.rng = splitmix64(opt.seed ^ ((uint64_t)c.gen * 0x9e3779b97f4a7c15ULL)) | 1;
    double end = now() + (double)rnd_range(&c, (size_t)opt.life_min,
                                           (size_t)opt.life_max) / 1000.0;
    while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
        for (int i = 0; i < 64; i++)
            one_op(&c);
        if (now() >= end)
            break;
    }
    atomic_fetch_add(&ops_total, c.ops);
    atomic_fetch_add(&remote_total, c.remote);
    atomic_fetch_add(&enomem_total, c.enomem);
    atomic_fetch_add(&bytes_total, c.bytes);
    atomic_store(&w->done, 1);
    return NULL;
}

static void worker_start(int index)
{
    struct worker *w = &workers[index];
    w->index = index;
    atomic_store(&w->done, 0);
    for (int tries = 0;; tries++) {
        int err = pthread_create(&w->tid, NULL, worker_main, w);
        if (!err)
            return;
        if (tries == 100)
            fail("pthread_create: error %d (%s)", err, strerror(err));
        sleep_ms(10);
    }
}

/* Joins finished workers; starts replacements unless `respawn` is 0.
 * Returns how many are still running. */
static int workers_reap(int respawn)
{
    int running = 0;
    for (int i = 0; i < opt.threads; i++) {
        if (!workers[i].tid)
            continue;
        if (!atomic_load(&workers[i].done)) {
            running++;
            continue;
        }
        pthread_join(workers[i].tid, NULL);
        workers[i].tid = 0;
        if (respawn) {
            worker_start(i);
            running++;
        }
    }
    return running;
}

/* Deadlock detector: no completed operation for opt.watchdog_s seconds. */
static void *watchdog_main(void *arg)
{
    (void)arg;
    uint64_t last = UINT64_MAX;
    for (;;) {
        for (int i = 0; i < opt.watchdog_s * 10; i++) {
            sleep_ms(100);
            if (atomic_load(&stop) == 2)
                return NULL;
        }
        uint64_t cur = atomic_load(&progress);
        if (cur == last) {
            static const char msg[] = "stress: FAIL hang: no operation completed "
                                      "within the watchdog period; aborting\n";
            if (write(2, msg, sizeof msg - 1) < 0)
                _exit(1);
            abort();
        }
        last = cur;
    }
}

/* ---- main thread -------------------------------------------------------- */

static size_t (*tally_check_fn)(void);
static uint64_t checks;

static void run_check(void)
{
    if (!tally_check_fn)
        return;
    size_t bad = tally_check_fn();
    checks++;
    if (bad)
        fail("tally_check: reported %zu problem(s)", bad);
}

/* Verifies and frees everything left in the table. */
static uint64_t drain_table(void)
{
    struct ctx c = { .gen = 0 };
    for (size_t i = 0; i < opt.slots; i++)
        if (table[i].p)
            slot_free(&c, &table[i]);
    return c.remote;
}

static void run(void)
{
    double start = now(), end = start + opt.seconds;
    double next_check = start, next_trim = start + opt.trim_ms / 1000.0;
    for (int i = 0; i < opt.threads; i++)
        worker_start(i);
    for (double t = now(); t < end; t = now()) {
        workers_reap(1);
        if (opt.check_ms && t >= next_check) {
            run_check();
            next_check = t + opt.check_ms / 1000.0;
        }
        if (opt.trim_ms && t >= next_trim) {
            malloc_trim(0);
            next_trim = t + opt.trim_ms / 1000.0;
        }
        sleep_ms(2);
    }
    atomic_store(&stop, 1);
    while (workers_reap(0))
        sleep_ms(2);
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [-t THREADS] [-s SECONDS] [-S SEED] [-n SLOTS] [-M LIVE_MIB] [-x MAX_SIZE]\n"
            "          [-l MIN_MS] [-L MAX_MS] [-c CHECK_MS] [-m TRIM_MS] [-u 0|1] [-w SECS]\n"
            "  -t workers kept alive (2)        -s run time in seconds (10)\n"
            "  -S seed (time based)             -n shared table slots (4096)\n"
            "  -M live MiB before big requests are skipped (512)\n"
            "  -x largest request in bytes; bigger ones become small (64 MiB)\n"
            "  -l/-L worker lifetime range in ms (50/500)\n"
            "  -c tally_check period in ms, 0 = off (100)\n"
            "  -m malloc_trim(0) period in ms, 0 = off (1000)\n"
            "  -u fill up to malloc_usable_size, not just the request (1)\n"
            "  -w hang watchdog: seconds without progress (60)\n", prog);
    exit(2);
}

static void parse_args(int argc, char **argv)
{
    int o;
    opt.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32);
    while ((o = getopt(argc, argv, "t:s:S:n:M:x:l:L:c:m:u:w:h")) != -1) {
        switch (o) {
        case 't': opt.threads = atoi(optarg); break;
        case 's': opt.seconds = atoi(optarg); break;
        case 'S': opt.seed = strtoull(optarg, NULL, 0); break;
        case 'n': opt.slots = strtoull(optarg, NULL, 0); break;
        case 'M': opt.live_cap = strtoull(optarg, NULL, 0) * MIB; break;
        case 'x': opt.max_size = strtoull(optarg, NULL, 0); break;
        case 'l': opt.life_min = atoi(optarg); break;
        case 'L': opt.life_max = atoi(optarg); break;
        case 'c': opt.check_ms = atoi(optarg); break;
        case 'm': opt.trim_ms = atoi(optarg); break;
        case 'u': opt.use_usable = atoi(optarg); break;
        case 'w': opt.watchdog_s = atoi(optarg); break;
        default: usage(argv[0]);
        }
    }
    if (optind != argc || opt.threads < 1 || opt.threads > MAX_THREADS || opt.seconds < 0 ||
        opt.slots < 1 || opt.max_size < 1 || opt.life_min < 1 || opt.life_max < opt.life_min || opt.watchdog_s < 1)
        usage(argv[0]);
}

int main(int argc, char **argv)
{
    parse_args(argc, argv);
    tally_check_fn = (size_t (*)(void))dlsym(RTLD_DEFAULT, "tally_check");
    printf("stress: seed=%" PRIu64 " threads=%d seconds=%d slots=%zu tally_check=%s\n",
           opt.seed, opt.threads, opt.seconds, opt.slots, tally_check_fn ? "yes" : "no");
    fflush(stdout);

    table = calloc(opt.slots, sizeof *table);
    if (!table)
        fail("calloc: table of %zu slots returned NULL", opt.slots);
    pthread_t dog;
    if (pthread_create(&dog, NULL, watchdog_main, NULL))
        fail("pthread_create: watchdog");

    double start = now();
    run();
    uint64_t remote = drain_table();
    run_check();
    double secs = now() - start;
    atomic_store(&stop, 2);
    pthread_join(dog, NULL);
    free(table);

    uint64_t ops = atomic_load(&ops_total);
    printf("stress: ok seed=%" PRIu64 " threads=%d ops=%" PRIu64 " (%.0f ops/s) in %.1f s, "
           "workers=%u remote=%" PRIu64 " allocated=%" PRIu64 " MiB enomem=%" PRIu64
           " checks=%" PRIu64 "\n", opt.seed, opt.threads, ops, (double)ops / secs, secs,
           atomic_load(&generation), atomic_load(&remote_total) + remote,
           atomic_load(&bytes_total) / MIB, atomic_load(&enomem_total), checks);
    fflush(stdout);
    return 0;
}
