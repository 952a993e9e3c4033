/*
 * timing.c - latency of each allocator call, as the seed study measured it
 * by hand: a cheap clock (the TSC on x86-64, calibrated against
 * CLOCK_MONOTONIC; clock_gettime elsewhere) whose own back-to-back cost is
 * measured once and subtracted from every sample, and page faults from
 * getrusage(RUSAGE_THREAD) around each call.
 *
 * Samples go to per-thread tables (mapped from the OS, never freed, so a
 * thread's numbers survive its exit), summed when read: no atomics and no
 * shared cache lines on the timed path. An exited thread's table goes to
 * the next new thread, counts and all (the sums do not care whose table a
 * sample is in): a table per thread ever made grew a program of short
 * threads by 32 KiB of RSS each, without bound.
 */
#define _GNU_SOURCE
#include "timing.h"
#include "options.h"
#include "report.h"
#include "../alloc/os.h"
#include "../alloc/lock.h"
#include "../alloc/init.h"
#include "../include/tally.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/resource.h>

struct timing_cell {
    uint64_t count, ticks, max_ticks;
    uint64_t buckets[TIMING_BUCKETS];
};

struct timing_thread {
    struct timing_thread *next;
    struct timing_thread *spare_next;
    struct timing_cell cell[HOOK_OPS][TIMING_CLASSES];
    uint64_t minflt[HOOK_OPS], majflt[HOOK_OPS];
};

static struct timing_thread *_Atomic threads;
static __thread struct timing_thread *tls_timing TLS_IE;
/* Exited threads' tables, for new threads (linked by `spare_next`), and
 * the table for samples a thread makes after its table went back (later
 * key destructors, glibc's late frees): under table_lock, which fork()
 * takes (timing_fork_*). */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static struct timing_thread *spare;
static struct timing_thread *late;
static pthread_key_t table_key;
static bool table_key_made;
static __thread bool tls_timing_gone TLS_IE;
static double ns_per_tick = 1.0;
static uint64_t overhead_ticks;
static bool calibrated;      /* release-stored after the two above */
static pthread_mutex_t calibrate_lock = PTHREAD_MUTEX_INITIALIZER;

static inline uint64_t ticks_now(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return __builtin_ia32_rdtsc();
#else
    return os_now_ns();
#endif
}

/* Sorts a few samples in place and returns the median. */
static uint64_t median(uint64_t *v, int n)
{
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
            uint64_t t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return v[n / 2];
}

static void timing_calibrate(void)
{
    uint64_t ns0 = os_now_ns(), t0 = ticks_now();
    while (os_now_ns() - ns0 < 2000000)       /* 2 ms */
        ;
    uint64_t ns1 = os_now_ns(), t1 = ticks_now();
    ns_per_tick = t1 > t0 ? (double)(ns1 - ns0) / (double)(t1 - t0) : 1.0;
    uint64_t pairs[255];
    for (int i = 0; i < 255; i++) {
        uint64_t a = ticks_now();
        pairs[i] = ticks_now() - a;
    }
    overhead_ticks = median(pairs, 255);
}

/* Only the first call calibrates; the rest skip the lock, which is held
 * for the 2 ms of calibration only (and taken around fork()). */
void timing_enable(void)
{
    if (!__atomic_load_n(&calibrated, __ATOMIC_ACQUIRE)) {
        lock_take(&calibrate_lock);
        if (!__atomic_load_n(&calibrated, __ATOMIC_RELAXED)) {
            timing_calibrate();
            __atomic_store_n(&calibrated, true, __ATOMIC_RELEASE);
        }
        lock_give(&calibrate_lock);
    }
    __atomic_store_n(&os_time_calls, true, __ATOMIC_RELAXED);
}

HOT_TEXT void timing_fork_prepare(void)
{
    pthread_mutex_lock(&calibrate_lock);
    pthread_mutex_lock(&table_lock);
}

HOT_TEXT void timing_fork_parent(void)
{
    pthread_mutex_unlock(&table_lock);
    pthread_mutex_unlock(&calibrate_lock);
}

/* Tables of the parent's other threads stay theirs (on `threads`, not
 * spare): their counts still add up, and the child has no thread to
 * give them back. */
HOT_TEXT void timing_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    calibrate_lock = fresh;
    table_lock = fresh;
}

static struct timing_thread *table_new(void)
{
    struct timing_thread *t = os_map(align_up(sizeof *t, OS_PAGE));
    if (!t)
        return NULL;
    t->next = atomic_load(&threads);
    while (!atomic_compare_exchange_weak(&threads, &t->next, t))
        ;
    return t;
}

/* Key destructor: the thread's table becomes a spare. Its later samples
 * go to the `late` table (timing_end). */
static void table_give_back(void *arg)
{
    struct timing_thread *t = arg;
    tls_timing = NULL;
    tls_timing_gone = true;
    lock_take(&table_lock);
    t->spare_next = spare;
    spare = t;
    lock_give(&table_lock);
}

/* The caller's table: its own, else a spare, else a new one. NULL when
 * the thread's table went back (the caller then takes `late` under
 * table_lock) or out of memory. Runs inside a hook (tls_in_hook), so the
 * calloc pthread_setspecific may make is not timed. */
static struct timing_thread *timing_thread(void)
{
    struct timing_thread *t = tls_timing;
    if (t || tls_timing_gone)
        return t;
    lock_take(&table_lock);
    if (!table_key_made)
        table_key_made = pthread_key_create(&table_key, table_give_back) == 0;
    bool keyed = table_key_made;
    if ((t = spare))
        spare = t->spare_next;
    lock_give(&table_lock);
    if (!t && !(t = table_new()))
        return NULL;
    /* Without a key (none left) the table is the thread's for good, as
     * before. */
    if (keyed)
        pthread_setspecific(table_key, t);
    return tls_timing = t;
}

void timing_begin(struct timing_mark *m)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    m->minflt = ru.ru_minflt;
    m->majflt = ru.ru_majflt;
    m->t0 = ticks_now();
}

static unsigned bucket_of(uint64_t ns)
{
    unsigned b = ns < 2 ? 0 : 63u - (unsigned)__builtin_clzll(ns);
    return b < TIMING_BUCKETS ? b : TIMING_BUCKETS - 1;
}

/* The row a request of `size` is filed under: "large" above the
 * effective mmap threshold, as raw_alloc decides, not above MEDIUM_MAX;
 * with mmap_threshold lowered, a 100 KB malloc is an mmap, and it showed
 * as the 104 KiB class's latency while the large row read 0. */
static unsigned timing_class(size_t size)
{
    return size <= init_mmap_threshold() ? sizeclass_of(size) : NUM_CLASSES;
}

static void cell_record(struct timing_thread *t, const struct timing_mark *m,
                        const struct rusage *ru, enum hook_op op, size_t size,
                        uint64_t ticks)
{
    struct timing_cell *c = &t->cell[op][timing_class(size)];
    c->count++;
    c->ticks += ticks;
    if (ticks > c->max_ticks)
        c->max_ticks = ticks;
    c->buckets[bucket_of((uint64_t)((double)ticks * ns_per_tick))]++;
    t->minflt[op] += (uint64_t)(ru->ru_minflt - m->minflt);
    t->majflt[op] += (uint64_t)(ru->ru_majflt - m->majflt);
}

void timing_end(const struct timing_mark *m, enum hook_op op, size_t size)
{
    uint64_t t1 = ticks_now();
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    /* timing=1 becomes visible to other threads before the clock is
     * calibrated; their first few samples are dropped, not misfiled. */
    if (!__atomic_load_n(&calibrated, __ATOMIC_ACQUIRE))
        return;
    uint64_t ticks = t1 - m->t0;
    ticks = ticks > overhead_ticks ? ticks - overhead_ticks : 0;
    struct timing_thread *t = timing_thread();
    if (t) {
        cell_record(t, m, &ru, op, size, ticks);
        return;
    }
    if (!tls_timing_gone)
        return;                 /* out of memory */
    lock_take(&table_lock);
    if (!late)
        late = table_new();
    if (late)
        cell_record(late, m, &ru, op, size, ticks);
    lock_give(&table_lock);
}

/* ---- reading ----------------------------------------------------------- */

static void cell_add(struct tally_timing_op *out, const struct timing_cell *c)
{
    out->count += c->count;
    out->total_ns += (uint64_t)((double)c->ticks * ns_per_tick);
    uint64_t max_ns = (uint64_t)((double)c->max_ticks * ns_per_tick);
    if (max_ns > out->max_ns)
        out->max_ns = max_ns;
    for (int b = 0; b < TIMING_BUCKETS; b++)
        out->buckets[b] += c->buckets[b];
}

/* Sums every thread's cell for (op, cls); cls == -1 sums all classes. */
static void timing_sum(int op, int cls, struct tally_timing_op *out)
{
    memset(out, 0, sizeof *out);
    for (struct timing_thread *t = atomic_load(&threads); t; t = t->next) {
        for (int k = 0; k < TIMING_CLASSES; k++)
            if (cls < 0 || k == cls)
                cell_add(out, &t->cell[op][k]);
    }
}

/* Upper bound, in ns, of the bucket holding quantile q. */
static uint64_t quantile_ns(const struct tally_timing_op *o, double q)
{
    uint64_t seen = 0, want = (uint64_t)((double)o->count * q);
    for (int b = 0; b < TIMING_BUCKETS; b++) {
        seen += o->buckets[b];
        if (seen > want)
            return (uint64_t)2 << b;
    }
    return o->max_ns;
}

__attribute__((visibility("default"))) int tally_timing_get(struct tally_timing *out)
{
    if (!out || out->size < sizeof(struct tally_timing)) {
        errno = EINVAL;
        return -1;
    }
    size_t size = out->size;
    memset(out, 0, size);
    out->size = size;
    out->version = TALLY_TIMING_VERSION;
    out->clock_overhead_ns = (uint64_t)((double)overhead_ticks * ns_per_tick);
    for (int op = 0; op < HOOK_OPS; op++) {
        timing_sum(op, -1, &out->ops[op]);
        for (struct timing_thread *t = atomic_load(&threads); t; t = t->next) {
            out->minor_faults[op] += t->minflt[op];
            out->major_faults[op] += t->majflt[op];
        }
    }
    struct os_counters os;
    os_counters_read(&os);
    for (int c = 0; c < OS_CALLS; c++) {
        out->syscalls[c] = os.calls[c];
        out->syscall_ns[c] = os.ns[c];
    }
    return 0;
}

__attribute__((visibility("default"))) int tally_timing_get_class(int op, size_t size,
                                                                   struct tally_timing_op *out)
{
    if (op < 0 || op >= HOOK_OPS || !out) {
        errno = EINVAL;
        return -1;
    }
    timing_sum(op, (int)timing_class(size), out);
    return 0;
}

__attribute__((visibility("default"))) void tally_timing_reset(void)
{
    for (struct timing_thread *t = atomic_load(&threads); t; t = t->next) {
        memset(t->cell, 0, sizeof t->cell);
        memset(t->minflt, 0, sizeof t->minflt);
        memset(t->majflt, 0, sizeof t->majflt);
    }
}

static const char *const op_names[HOOK_OPS] = { "malloc", "calloc", "aligned", "realloc", "free" };
static const char *const os_names[OS_CALLS] = { "mmap", "munmap", "mremap", "madvise" };

static void report_row(struct diag_buf *b, const char *name, const char *cls,
                       const struct tally_timing_op *o)
{
    diag_str(b, "  ");
    diag_str(b, name);
    diag_str(b, " ");
    diag_str(b, cls);
    diag_str(b, ": count ");
    diag_dec(b, o->count);
    diag_str(b, ", mean ");
    diag_dec(b, o->count ? o->total_ns / o->count : 0);
    diag_str(b, " ns, p50 <= ");
    diag_dec(b, quantile_ns(o, 0.50));
    diag_str(b, " ns, p99 <= ");
    diag_dec(b, quantile_ns(o, 0.99));
    diag_str(b, " ns, max ");
    diag_dec(b, o->max_ns);
    diag_str(b, " ns\n");
}

void timing_report(int fd)
{
    int out = fd >= 0 ? fd : report_open();
    struct tally_timing t = { .size = sizeof t };
    tally_timing_get(&t);
    struct diag_buf b = { .len = 0 };
    diag_str(&b, "tally: timing report (clock overhead ");
    diag_dec(&b, t.clock_overhead_ns);
    diag_str(&b, " ns subtracted)\n");
    for (int op = 0; op < HOOK_OPS; op++) {
        if (!t.ops[op].count)
            continue;
        /* A check before each line: report_maybe_flush leaves 160 bytes,
         * one line's worth (a row, its page faults and a class row
         * overran it, and diag_str cut the text). */
        report_maybe_flush(&b, out);
        report_row(&b, op_names[op], "all sizes", &t.ops[op]);
        report_maybe_flush(&b, out);
        diag_str(&b, "    page faults: ");
        diag_dec(&b, t.minor_faults[op]);
        diag_str(&b, " minor, ");
        diag_dec(&b, t.major_faults[op]);
        diag_str(&b, " major\n");
        for (int cls = 0; cls < TIMING_CLASSES; cls++) {
            struct tally_timing_op o;
            timing_sum(op, cls, &o);
            if (!o.count)
                continue;
            struct diag_buf name = { .len = 0 };
            diag_str(&name, "  class ");
            if (cls < NUM_CLASSES)
                diag_dec(&name, sizeclass_block_size[cls]);
            else
                diag_str(&name, "large");
            name.text[name.len] = '\0';
            report_maybe_flush(&b, out);
            report_row(&b, "", name.text, &o);
        }
    }
    for (int c = 0; c < OS_CALLS; c++) {
        report_maybe_flush(&b, out);
        diag_str(&b, "  ");
        diag_str(&b, os_names[c]);
        diag_str(&b, ": ");
        diag_dec(&b, t.syscalls[c]);
        diag_str(&b, " calls, ");
        diag_dec(&b, t.syscall_ns[c] / 1000);
        diag_str(&b, " us\n");
    }
    diag_flush(&b, out);
    if (fd < 0)
        report_close(out);
}
