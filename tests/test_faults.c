/*
 * test_faults.c - the allocator under failure: one mmap/mremap failing at
 * each call site in turn (test_fail_mmap=N), address-space exhaustion in
 * the middle of a threaded run, and signals arriving during allocation.
 * Every failed call must return NULL with ENOMEM and leave the heap sound.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/time.h>
#include "tally.h"

#define SLOTS 400

struct slot { unsigned char *p; size_t n; };

static void fill(struct slot *s, size_t i) { memset(s->p, (int)(i * 7 + 1), s->n); }

static int intact(const struct slot *s, size_t i)
{
    return s->p[0] == (unsigned char)(i * 7 + 1) && s->p[s->n - 1] == (unsigned char)(i * 7 + 1);
}

/* Allocates a mix that needs fresh mappings of every kind, with one OS call
 * (the fail_at-th) failing; exits non-zero on any broken promise. */
static void run_with_failure(void *arg)
{
    long fail_at = *(long *)arg;
    static struct slot v[SLOTS];
    char num[32];
    malloc_trim(0);                        /* empty the caches: force mmaps */
    snprintf(num, sizeof num, "%ld", fail_at);
    tally_option_set("test_fail_mmap", num);
    size_t nulls = 0;
    for (size_t i = 0; i < SLOTS; i++) {
        size_t kind = i % 5;
        v[i].n = kind == 0 ? 5000 : kind == 1 ? 100000 : kind == 2 ? (3u << 20) : 40;
        errno = 0;
        if (kind == 3) {
            void *q = NULL;
            int rc = posix_memalign(&q, 1 << 20, 300000);
            if (rc != 0 && rc != ENOMEM)
                _exit(20);
            v[i].p = q;
            v[i].n = 300000;
        } else if (kind == 4 && i >= 5 && v[i - 3].p) {
            /* Grow an earlier large block: mremap, maybe a move. */
            unsigned char *q = realloc(v[i - 3].p, 9u << 20);
            if (!q) {
                if (errno != ENOMEM || !intact(&v[i - 3], i - 3))
                    _exit(21);
                nulls++;
            } else {
                v[i - 3].p = q;
                if (!intact(&v[i - 3], i - 3))
                    _exit(22);
                v[i - 3].n = 9u << 20;
                fill(&v[i - 3], i - 3);
            }
            v[i].p = malloc(v[i].n);
        } else {
            v[i].p = malloc(v[i].n);
        }
        if (!v[i].p) {
            if (errno != ENOMEM && kind != 3)
                _exit(23);
            nulls++;
            continue;
        }
        fill(&v[i], i);
    }
    tally_option_set("test_fail_mmap", "0");
    for (size_t i = 0; i < SLOTS; i++) {
        if (v[i].p && !intact(&v[i], i))
            _exit(24);
        free(v[i].p);
    }
    void *again = malloc(3u << 20);
    if (!again)
        _exit(25);
    free(again);
    _exit(nulls ? 0 : 30);                 /* 30: the failure never happened */
}

static struct child_result run_with_failure_child(long n)
{
    return run_in_child(run_with_failure, &n);
}

Test(faults, every_mmap_call_site_may_fail, .timeout = 120)
{
    int failures_seen = 0;
    for (long n = 1; n <= 60; n++) {
        struct child_result r = run_with_failure_child(n);
        cr_assert(WIFEXITED(r.status), "fail_at=%ld crashed: %s", n, r.err);
        int code = WEXITSTATUS(r.status);
        cr_assert(code == 0 || code == 30, "fail_at=%ld broke a promise: step %d", n, code);
        failures_seen += code == 0;
    }
    cr_assert_gt(failures_seen, 20, "the injected failures reached the program");
}

/* ---- RLIMIT_AS reached while several threads allocate ------------------ */

static atomic_int go;

static void *greedy(void *arg)
{
    (void)arg;
    static _Thread_local void *held[4096];
    size_t n = 0, nulls = 0;
    while (!atomic_load(&go))
        ;
    for (int round = 0; round < 20000; round++) {
        size_t size = (size_t)(round % 7 == 0 ? 1 << 20 : 100 + round % 5000);
        void *p = malloc(size);
        if (!p) {
            if (errno != ENOMEM)
                return (void *)1;
            nulls++;
            /* Recover: free half of what we hold. */
            for (size_t i = 0; i < n; i += 2) {
                free(held[i]);
                held[i] = NULL;
            }
            continue;
        }
        memset(p, 0x3c, size < 256 ? size : 256);
        if (n < 4096)
            held[n++] = p;
        else
            free(p);
    }
    for (size_t i = 0; i < n; i++) {
        if (held[i] && ((unsigned char *)held[i])[0] != 0x3c)
            return (void *)2;
        free(held[i]);
    }
    return (void *)(uintptr_t)(nulls ? 0 : 3);
}

static void threads_hit_the_limit(void *arg)
{
    (void)arg;
    struct rlimit rl;
    getrlimit(RLIMIT_AS, &rl);
    long vm = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f || fscanf(f, "%ld", &vm) != 1)
        _exit(10);
    fclose(f);
    rl.rlim_cur = (rlim_t)vm * 4096 + (384u << 20);
    if (setrlimit(RLIMIT_AS, &rl) != 0)
        _exit(11);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        if (pthread_create(&t[i], NULL, greedy, NULL) != 0)
            _exit(12);
    atomic_store(&go, 1);
    uintptr_t bad = 0, none_failed = 0;
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        bad += (uintptr_t)ret == 1 || (uintptr_t)ret == 2;
        none_failed += (uintptr_t)ret == 3;
    }
    _exit(bad ? 13 : none_failed == 4 ? 14 : 0);
}

Test(faults, rlimit_as_in_a_threaded_run, .timeout = 120)
{
    struct child_result r = run_in_child(threads_hit_the_limit, NULL);
    cr_assert(WIFEXITED(r.status), "crashed: %d %s", r.status, r.err);
    cr_assert_eq(WEXITSTATUS(r.status), 0, "step %d", WEXITSTATUS(r.status));
}

/* ---- signals arriving in the middle of allocation ---------------------- */

static volatile sig_atomic_t ticks;
static void on_tick(int sig) { (void)sig; ticks++; }

static void *churn_until(void *arg)
{
    atomic_int *stop = arg;
    void *v[128] = { 0 };
    for (unsigned i = 0; !atomic_load(stop); i++) {
        unsigned k = i % 128;
        free(v[k]);
        v[k] = malloc((i * 131) % 70000 + 1);
        if (!v[k])
            return (void *)1;
        ((char *)v[k])[0] = 1;
    }
    for (int k = 0; k < 128; k++)
        free(v[k]);
    return NULL;
}

Test(faults, signals_during_allocation, .timeout = 60)
{
    struct sigaction sa = { .sa_handler = on_tick };
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = { { 0, 200 }, { 0, 200 } };
    setitimer(ITIMER_REAL, &it, NULL);
    atomic_int stop = 0;
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, churn_until, &stop);
    void *v[64] = { 0 };
    for (unsigned i = 0; ticks < 2000; i++) {
        free(v[i % 64]);
        v[i % 64] = realloc(NULL, (i * 7) % 3000 + 1);
    }
    atomic_store(&stop, 1);
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, NULL);
    for (int i = 0; i < 2; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        cr_assert_null(ret);
    }
    for (int i = 0; i < 64; i++)
        free(v[i]);
}
