/*
 * test_purge.c - freed memory goes back to the OS: after a short delay on
 * its own, and at once on malloc_trim(0); and freed memory is used again
 * before fresh memory is.
 */
#include "helpers.h"
#include "tally.h"
#include "../alloc/segment.h"
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>

/* Allocates as a live program would, in another class: the periodic sweep
 * runs on the allocation slow path. */
static void allocate_a_little(size_t size)
{
    void *tmp[64];
    for (int k = 0; k < 64; k++)
        tmp[k] = malloc(size);
    for (int k = 0; k < 64; k++)
        free(tmp[k]);
}

Test(purge, malloc_trim_returns_freed_small_blocks_at_once)
{
    size_t n;
    void **v = build_peak(1000, &n);
    long full = rss_kib();
    free_all(v, n);
    cr_assert_eq(malloc_trim(0), 1, "something was released");
    long trimmed = rss_kib();
    cr_assert_lt(trimmed, full - 150 * 1024, "RSS %ld -> %ld KiB", full, trimmed);
}

/* A thread that freed a 64 MiB peak and now waits for work (a thread
 * pool's idle worker) never sweeps its heap again: another thread's
 * malloc_trim, and the other threads' own sweeps once it has been idle for
 * a second, give its empty pages back. Both kept the 64 MiB before. */
enum { IDLE_BLOCK = 1000 };

struct idle_worker {
    pthread_barrier_t freed, quit;
    size_t n;
};

static void *peak_then_wait(void *arg)
{
    struct idle_worker *w = arg;
    void **v = build_peak(IDLE_BLOCK, &w->n);
    free_all(v, w->n);
    munmap(v, w->n * sizeof *v);
    pthread_barrier_wait(&w->freed);
    pthread_barrier_wait(&w->quit);         /* idle: no malloc, no sweep */
    return NULL;
}

static long idle_worker_rss_after(bool trim)
{
    static struct idle_worker w;
    pthread_barrier_init(&w.freed, NULL, 2);
    pthread_barrier_init(&w.quit, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, peak_then_wait, &w);
    pthread_barrier_wait(&w.freed);
    long peak = rss_kib();
    if (trim) {
        malloc_trim(0);
    } else {
        for (int i = 0; i < 150; i++) {     /* 1.5 s of a live main thread */
            allocate_a_little(4000 + (size_t)(i % 8) * 1000);
            sleep_ms(10);
        }
    }
    long after = rss_kib();
    pthread_barrier_wait(&w.quit);
    pthread_join(t, NULL);
    cr_assert_gt(peak, 150 * 1024, "the worker's peak is not resident: %ld KiB", peak);
    return peak - after;
}

Test(purge, malloc_trim_reaches_an_idle_threads_heap)
{
    long gone = idle_worker_rss_after(true);
    cr_assert_gt(gone, 150 * 1024, "malloc_trim gave back %ld KiB of a 192 MiB peak", gone);
}

Test(purge, other_threads_give_back_an_idle_threads_pages, .timeout = 30)
{
    long gone = idle_worker_rss_after(false);
    cr_assert_gt(gone, 150 * 1024, "1.5 s later, %ld KiB of a 192 MiB peak were given back",
                 gone);
}

/* A trim by another thread may give back a page of an idle heap as soon
 * as its count of blocks in use reads 0 (a medium page: its whole segment,
 * unmapped), so the owner's free must not touch the page after storing
 * that count. A hardware watchpoint on the count stops the owner right
 * after the store, wherever the compiler put it, and main trims meanwhile.
 * The store of the list head used to follow it: the owner wrote into the
 * unmapped segment (SIGSEGV). */
enum { WINDOW_BLOCK = 300000, WINDOW_BLOCKS = 20 };   /* two medium pages */

static struct {
    atomic_int stopped, trimmed;
    void *segment;
    bool unmapped;
} window;

static int watch_writes(void *addr, int sig)
{
    struct perf_event_attr a = {
        .type = PERF_TYPE_BREAKPOINT, .size = sizeof a, .bp_type = HW_BREAKPOINT_W,
        .bp_addr = (uintptr_t)addr, .bp_len = HW_BREAKPOINT_LEN_4, .sample_period = 1,
        .disabled = 1, .exclude_kernel = 1, .exclude_hv = 1,
    };
    int fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (fd < 0)
        return -1;
    struct f_owner_ex owner = { F_OWNER_TID, (pid_t)syscall(SYS_gettid) };
    fcntl(fd, F_SETOWN_EX, &owner);
    fcntl(fd, F_SETSIG, sig);
    fcntl(fd, F_SETFL, O_ASYNC);
    return fd;
}

/* Runs on the owner right after its store of the count. */
static void window_stop(int sig)
{
    (void)sig;
    atomic_store(&window.stopped, 1);
    while (!atomic_load(&window.trimmed))
        sched_yield();
    window.unmapped = msync(window.segment, OS_PAGE, MS_ASYNC) != 0 && errno == ENOMEM;
}

static void *free_last_of_a_page(void *arg)
{
    (void)arg;
    void *b[WINDOW_BLOCKS];
    for (int i = 0; i < WINDOW_BLOCKS; i++) {
        b[i] = malloc(WINDOW_BLOCK);
        memset(b[i], 1, 64);
    }
    /* The first page (full, not current) keeps only its last block. */
    struct segment *s = segment_of(b[0]);
    int last = 0;
    for (int i = 1; i < WINDOW_BLOCKS && segment_of(b[i]) == s; i++) {
        free(b[last]);
        last = i;
    }
    window.segment = s;
    int fd = watch_writes(&segment_page_of(s, b[last])->used, SIGUSR2);
    if (fd < 0)
        _exit(3);
    ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
    free(b[last]);
    close(fd);
    for (int i = last + 1; i < WINDOW_BLOCKS; i++)
        free(b[i]);
    return NULL;
}

static atomic_int probe_hits;

static void probe_fired(int sig)
{
    (void)sig;
    atomic_fetch_add(&probe_hits, 1);
}

static void trim_in_the_window(void *arg)
{
    (void)arg;
    signal(SIGUSR2, window_stop);
    pthread_t t;
    pthread_create(&t, NULL, free_last_of_a_page, NULL);
    /* A watchpoint that never fires (seen under a PVM hypervisor: the
     * event opens, the write passes) would leave this loop spinning and
     * the owner waiting in its free forever. */
    time_t give_up = time(NULL) + 10;
    while (!atomic_load(&window.stopped)) {
        if (time(NULL) > give_up)
            _exit(4);
        sched_yield();
    }
    malloc_trim(0);
    atomic_store(&window.trimmed, 1);
    pthread_join(t, NULL);
    if (!window.unmapped)
        _exit(2);           /* the trim did not take the page: proves nothing */
}

Test(purge, a_trim_between_an_owners_free_and_its_return_is_safe, .timeout = 30)
{
    static volatile int probe;
    signal(SIGUSR2, probe_fired);
    int fd = watch_writes((void *)&probe, SIGUSR2);
    if (fd < 0)
        cr_skip_test("no hardware watchpoints here (perf_event_open: %s)", strerror(errno));
    ioctl(fd, PERF_EVENT_IOC_REFRESH, 1);
    probe = 1;
    close(fd);
    /* The handler stays: a late signal must not kill the test. */
    if (!atomic_load(&probe_hits))
        cr_skip_test("a hardware watchpoint opened but did not fire on a write");
    struct child_result r = run_in_child(trim_in_the_window, NULL);
    if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 4)
        cr_skip_test("the owner's watchpoint never fired");
    cr_assert_eq(child_signal(&r), 0, "the owner's free died of signal %d after the trim",
                 child_signal(&r));
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
              "exit %d (2: the trim left the page, 3: no watchpoint)", WEXITSTATUS(r.status));
}

Test(purge, empty_pages_are_purged_after_the_delay_without_trim)
{
    size_t n;
    void **v = build_peak(3000, &n);
    long full = rss_kib();
    free_all(v, n);
    long now = full;
    for (int round = 0; round < 200 && now > full - 150 * 1024; round++) {
        allocate_a_little(2000);
        sleep_ms(5);
        now = rss_kib();
    }
    cr_assert_lt(now, full - 150 * 1024, "RSS %ld -> %ld KiB", full, now);
}

Test(purge, medium_blocks_are_returned_too)
{
    /* And their segments with them once all four pages went back. */
    struct tally_stats s0 = { .size = sizeof s0 }, s1 = { .size = sizeof s1 };
    cr_assert_eq(tally_stats_get(&s0), 0);
    size_t n;
    void **v = build_peak(30000, &n);        /* below SPAN_MIN */
    long full = rss_kib();
    free_all(v, n);
    malloc_trim(0);
    cr_assert_lt(rss_kib(), full - 150 * 1024);
    cr_assert_eq(tally_stats_get(&s1), 0);
    cr_assert_leq(s1.segments, s0.segments + 1, "%llu segments live after the trim, %llu before",
                  (unsigned long long)s1.segments, (unsigned long long)s0.segments);
}

Test(purge, ping_pong_reuses_memory_without_growing)
{
    /* A free/malloc cycle of the same working set must not grow RSS. */
    size_t n;
    void **v = build_peak(512, &n);
    long first = rss_kib();
    for (int round = 0; round < 5; round++) {
        for (size_t i = 0; i < n; i++)
            free(v[i]);
        for (size_t i = 0; i < n; i++) {
            v[i] = malloc(512);
            memset(v[i], 0x44, 512);
        }
    }
    cr_assert_lt(rss_kib(), first + 16 * 1024);
}

Test(purge, sparse_pages_return_free_os_pages_and_take_them_back)
{
    enum { N = 30000, SIZE = 2000 };
    static unsigned char *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(SIZE);
        memset(v[i], (int)(i & 0xff), SIZE);
    }
    long full = rss_kib();
    for (int i = 0; i < N; i++) {
        if (i % 10) {
            free(v[i]);
            v[i] = NULL;
        }
    }
    long now = full;
    for (int round = 0; round < 200 && now > full / 2; round++) {
        allocate_a_little(3000);
        sleep_ms(5);
        now = rss_kib();
    }
    cr_assert_lt(now, full / 2, "RSS %ld -> %ld KiB with 10%% still live", full, now);
    /* Survivors intact; refilling the same class reuses the held blocks. */
    for (int i = 0; i < N; i += 10)
        for (int k = 0; k < SIZE; k += 97)
            cr_assert_eq(v[i][k], (unsigned char)(i & 0xff), "block %d byte %d", i, k);
    for (int i = 0; i < N; i++) {
        if (!v[i]) {
            v[i] = malloc(SIZE);
            memset(v[i], 0x77, SIZE);
        }
    }
    for (int i = 0; i < N; i++) {
        cr_assert_eq(v[i][SIZE - 1], i % 10 ? 0x77 : (unsigned char)(i & 0xff));
        free(v[i]);
    }
}

Test(purge, a_page_taken_over_by_another_class_gives_back_the_rest)
{
    /* 60 blocks of 48 KiB fill most of one medium page; once empty, the
     * page is retired and kept warm for the delay. */
    enum { N = 60, BIG = 48 << 10, OTHER = 9000 };
    cr_assert_eq(tally_option_set("purge_delay", "10000"), 0);  /* medium: 1 s */
    void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(BIG);
        memset(v[i], 0x55, BIG);
    }
    long full = rss_kib();
    for (int i = 0; i < N; i++)
        free(v[i]);
    sleep_ms(600);                      /* the next sweep retires the page */
    free(malloc(100));
    /* Another medium class takes the warm page over and uses one block. */
    unsigned char *p = malloc(OTHER);
    memset(p, 0x66, OTHER);
    long reused = rss_kib();
    cr_assert_gt(reused, full - 512, "the page was kept warm: %ld -> %ld KiB", full, reused);
    /* What the first class carved beyond the second's reach goes back. */
    malloc_trim(0);
    long after = rss_kib();
    cr_assert_lt(after, full - 2048, "RSS %ld -> %ld -> %ld KiB", full, reused, after);
    cr_assert_eq(p[OTHER - 1], 0x66);
    free(p);
}

Test(purge, a_heap_idle_past_the_delay_returns_empty_pages_at_its_next_sweep)
{
    cr_assert_eq(tally_option_set("purge_delay", "300"), 0);
    size_t n;
    void **v = build_peak(3000, &n);
    long full = rss_kib();
    free_all(v, n);
    sleep_ms(400);                      /* idle: no sweep runs */
    /* One sweep: pages that emptied before the idle spell are dated from
     * the last sweep, not from now, and go back at once. */
    allocate_a_little(2000);
    long now = rss_kib();
    cr_assert_lt(now, full - 150 * 1024, "RSS %ld -> %ld KiB", full, now);
}

/* ---- a retired page goes back to its own class ------------------------ */

#include <pthread.h>

enum { RETIRE_CLASSES = 24 };

static void *use_classes_and_exit(void *arg)
{
    void **first = arg;
    void *v[RETIRE_CLASSES];
    for (int i = 0; i < RETIRE_CLASSES; i++)
        v[i] = malloc(16 + 48 * (size_t)i);     /* 24 different classes */
    *first = v[0];
    for (int i = 0; i < RETIRE_CLASSES; i++)
        free(v[i]);
    /* Past half the purge delay, the exit's sweep covers small pages; short
     * of the whole delay, it retires the empty ones without purging them. */
    sleep_ms(60);
    return NULL;
}

static void *take_one(void *arg)
{
    *(void **)arg = malloc(16);
    return NULL;
}

Test(purge, a_new_thread_gets_the_retired_page_of_its_own_class)
{
    /* The first thread's heap goes to the pool with 24 retired pages, the
     * 16-byte one retired first (more than 8 back from the newest). The
     * next thread takes that heap; its malloc(16) must land in the same
     * page, not in another class's page re-carved (which keeps what the
     * old class touched). */
    cr_assert_eq(tally_option_set("purge_delay", "100"), 0);
    void *old = NULL, *got = NULL;
    run_in_thread(use_classes_and_exit, &old);
    run_in_thread(take_one, &got);
    cr_assert_eq((uintptr_t)got >> 16, (uintptr_t)old >> 16,
                 "malloc(16) at %p, the retired 16-byte page held %p", got, old);
    free(got);
}

/* Gives the calling thread's heap volume enough to be past its young,
 * coarse phase (heap.c): every class has pages of its own, and lending
 * applies. The blocks stay allocated (no empty page to take back) until
 * volume_done. */
static void **volume(void)
{
    void **v = malloc(400 * sizeof *v);
    for (int i = 0; i < 400; i++)
        v[i] = malloc(4000);
    return v;
}

static void volume_done(void **v)
{
    for (int i = 0; i < 400; i++)
        free(v[i]);
    free(v);
}

/* Runs fn in a thread of its own; returns what fn counted into its int. */
static int count_in_thread(void *(*fn)(void *))
{
    int n = 0;
    run_in_thread(fn, &n);
    return n;
}

/* In a thread of its own (a heap with volume, but no page of these
 * classes yet): 64 blocks of 192 B,
 * every other one freed, then 33 of 150 B, whose class (160 B) has no
 * page of its own. (192 and 160 B are the upper classes of their pairs,
 * so a young heap's coarse classes (heap.c) change nothing here.) */
struct lending {
    void *holes[32];
    void *got[33];
    size_t usable[33];
};

static void *fill_holes_of_a_neighbour(void *arg)
{
    struct lending *l = arg;
    void **vol = volume();
    void *v[64];
    for (int i = 0; i < 64; i++) {
        v[i] = malloc(192);
        memset(v[i], 0x55, 192);
    }
    for (int i = 0; i < 32; i++) {
        l->holes[i] = v[2 * i];
        free(v[2 * i]);
    }
    for (int i = 0; i < 33; i++) {
        l->got[i] = malloc(150);
        l->usable[i] = malloc_usable_size(l->got[i]);
    }
    for (int i = 0; i < 33; i++)
        free(l->got[i]);
    for (int i = 0; i < 32; i++)
        free(v[2 * i + 1]);
    volume_done(vol);
    return NULL;
}

Test(purge, a_class_with_no_room_fills_a_neighbours_holes_before_a_fresh_page)
{
    struct lending l;
    run_in_thread(fill_holes_of_a_neighbour, &l);
    for (int i = 0; i < 32; i++) {
        int hole = 0;
        for (int k = 0; k < 32; k++)
            hole |= l.got[i] == l.holes[k];
        cr_assert(hole && l.usable[i] == 192, "malloc(150) #%d at %p (usable %zu) is no hole of "
                  "the 192-byte page", i, l.got[i], l.usable[i]);
    }
    /* The holes are used up: the class takes a page of its own. */
    cr_assert_eq(l.usable[32], 160);
}

/* In a thread of its own (a heap with volume): 600 blocks of 256 B fill
 * two pages and start a third; the first page's blocks but one are freed,
 * then as many are asked for again. Counts how many were freed and how many of
 * the new ones land back in the first page. */
enum { REUSE_BLOCKS = 600, REUSE_SIZE = 256, SMALL_RUN_TEST = PAGE_SIZE / 4 };
struct reuse { int freed, back; };

static void *refill_an_older_page(void *arg)
{
    struct reuse *r = arg;
    void **vol = volume();
    void **v = malloc(REUSE_BLOCKS * sizeof *v);
    for (int i = 0; i < REUSE_BLOCKS; i++) {
        v[i] = malloc(REUSE_SIZE);
        memset(v[i], 0x66, REUSE_SIZE);
    }
    /* v[0] stays: an empty page would be retired by a sweep that fell
     * between the frees and the mallocs, and leave the queue. */
    uintptr_t first = (uintptr_t)v[0] >> PAGE_SHIFT;
    for (int i = 1; i < REUSE_BLOCKS; i++) {
        if ((uintptr_t)v[i] >> PAGE_SHIFT == first) {
            free(v[i]);
            v[i] = NULL;
            r->freed++;
        }
    }
    for (int i = 0, left = r->freed; i < REUSE_BLOCKS && left > 0; i++) {
        if (!v[i]) {
            v[i] = malloc(REUSE_SIZE);
            r->back += (uintptr_t)v[i] >> PAGE_SHIFT == first;
            left--;
        }
    }
    for (int i = 0; i < REUSE_BLOCKS; i++)
        free(v[i]);
    free(v);
    volume_done(vol);
    return NULL;
}

/* Blocks freed in an older page of a class go out again before the page
 * being carved carves another run (page.c, SMALL_RUN: 16 KiB, 64 blocks
 * of 256 B): a FIFO-like program (a queue of messages) otherwise carves
 * every page of its classes whole while the older pages fill with holes,
 * up to a page of resident slack per class. Before, 88 of the first
 * page's 255 blocks came back: the third page carved the rest of its
 * area first. */
Test(purge, freed_blocks_of_an_older_page_go_out_before_the_current_page_carves_on)
{
    /* A sweep every 500 ms, a sparse page's purge after two 5 s apart:
     * none while the test runs, however slow the machine. */
    cr_assert_eq(tally_option_set("purge_delay", "10000"), 0);
    struct reuse r = { 0 };
    run_in_thread(refill_an_older_page, &r);
    cr_assert_gt(r.freed, 200, "the first page held %d blocks", r.freed);
    cr_assert_geq(r.back, r.freed - (int)(SMALL_RUN_TEST / REUSE_SIZE),
                  "%d of the first page's %d freed blocks were used again", r.back, r.freed);
}

/* In a thread of its own: 1,000 blocks of 192 B, all but every tenth
 * freed (900 holes), then 100 pairs of malloc(150) and free: lending stops
 * after a bounded run, so the class gets a page of its own and its
 * mallocs go back to the fast path. Returns the pairs served at 160 B. */
static void *pairs_beside_many_holes(void *arg)
{
    int *own = arg;
    void **vol = volume();
    void **v = malloc(1000 * sizeof *v);
    for (int i = 0; i < 1000; i++)
        v[i] = malloc(192);
    for (int i = 0; i < 1000; i++)
        if (i % 10)
            free(v[i]);
    for (int i = 0; i < 100; i++) {
        void *p = malloc(150);
        *own += malloc_usable_size(p) == 160;
        free(p);
    }
    for (int i = 0; i < 1000; i += 10)
        free(v[i]);
    free(v);
    volume_done(vol);
    return NULL;
}

Test(purge, lending_to_a_class_stops_after_a_bounded_run)
{
    int own = count_in_thread(pairs_beside_many_holes);
    cr_assert_geq(own, 50, "only %d of 100 malloc(150) came from a 160-byte page", own);
}

/* A young heap (a new thread's) serves 140 B, whose class is 144 B, from
 * the 160 B class its pair shares, and 150 B from the same page. Once the
 * heap has set up its first 24 pages (400 blocks of 4,000 B take about
 * 28), every class has its own: 200 B gets 208 (224 while young). (Not
 * 140 B again: the 160 B holes would lend it one.) */
struct young { size_t usable_140; int same_page; size_t usable_after; };

static void *young_then_grown(void *arg)
{
    struct young *y = arg;
    char *p = malloc(140), *q = malloc(150);
    y->usable_140 = malloc_usable_size(p);
    y->same_page = (uintptr_t)p >> 16 == (uintptr_t)q >> 16;
    free(p);
    free(q);
    void **vol = volume();
    p = malloc(200);
    y->usable_after = malloc_usable_size(p);
    free(p);
    volume_done(vol);
    return NULL;
}

Test(purge, a_young_heap_pairs_its_classes_until_it_has_volume)
{
    struct young y;
    run_in_thread(young_then_grown, &y);
    cr_assert_eq(y.usable_140, 160, "malloc(140) in a young heap: usable %zu", y.usable_140);
    cr_assert(y.same_page, "140 B and 150 B came from different pages");
    cr_assert_eq(y.usable_after, 208, "malloc(200) after 400 blocks of 4 KB: usable %zu",
                 y.usable_after);
}

/* A young heap with holes in the 192 B class: 129 B (class 144, paired
 * with 160) gets a 160 B block, not a lent 192 B one (49 % over). */
static void *no_lending_while_young(void *arg)
{
    size_t *usable = arg;
    void *v[64];
    for (int i = 0; i < 64; i++)
        v[i] = malloc(192);
    for (int i = 0; i < 64; i += 2)
        free(v[i]);
    void *p = malloc(129);
    *usable = malloc_usable_size(p);
    free(p);
    for (int i = 1; i < 64; i += 2)
        free(v[i]);
    return NULL;
}

Test(purge, a_young_heap_neither_lends_nor_exceeds_a_quarter)
{
    size_t usable = 0;
    run_in_thread(no_lending_while_young, &usable);
    cr_assert_eq(usable, 160, "malloc(129) in a young heap beside 192 B holes: usable %zu",
                 usable);
}


/* Holes in the two classes above 256 B (288 and 320), then aligned
 * requests whose class is 256 B: a lent block would be 32-byte aligned. */
static void *align_beside_holes(void *arg)
{
    int *misaligned = arg;
    void **vol = volume();
    void *v[2][64];
    for (int i = 0; i < 64; i++) {
        v[0][i] = malloc(288);
        v[1][i] = malloc(320);
    }
    for (int i = 0; i < 64; i += 2) {
        free(v[0][i]);
        free(v[1][i]);
    }
    void *a[16];
    for (int i = 0; i < 16; i++) {
        cr_assert_eq(posix_memalign(&a[i], 256, 200), 0);
        *misaligned += (uintptr_t)a[i] % 256 != 0;
    }
    for (int i = 0; i < 16; i++)
        free(a[i]);
    for (int i = 1; i < 64; i += 2) {
        free(v[0][i]);
        free(v[1][i]);
    }
    volume_done(vol);
    return NULL;
}

Test(purge, an_aligned_request_is_never_lent_a_neighbours_block)
{
    int misaligned = count_in_thread(align_beside_holes);
    cr_assert_eq(misaligned, 0, "%d of 16 blocks not 256-byte aligned", misaligned);
}

/* Whether this kernel takes a list of ranges to purge for the calling
 * process (process_madvise with PIDFD_SELF and MADV_DONTNEED). */
static bool kernel_takes_purge_lists(void)
{
    char *p = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq(p, MAP_FAILED);
    struct iovec v[2] = { { p, 4096 }, { p + 8192, 4096 } };
    long r = syscall(SYS_process_madvise, -10001, v, 2, MADV_DONTNEED, 0u);
    munmap(p, 3 * 4096);
    return r == 8192;
}

/* One touched block in each of `n` small classes, all freed, then
 * malloc_trim(0): one sweep that purges the pages that emptied (those of
 * classes the test runner also uses stay). Returns the madvise-family
 * calls it took. */
static uint64_t calls_to_purge_pages(int n)
{
    void *v[64];
    size_t size = 16;
    for (int i = 0; i < n; i++, size = size * 9 / 8 + 16) {
        v[i] = malloc(size);
        memset(v[i], 0x44, size);
    }
    for (int i = 0; i < n; i++)
        free(v[i]);
    struct tally_stats before = { .size = sizeof before }, after = before;
    tally_stats_get(&before);
    malloc_trim(0);
    tally_stats_get(&after);
    cr_assert_gt(after.purged_bytes, before.purged_bytes, "the pages were purged");
    return after.madvise_calls - before.madvise_calls;
}

Test(purge, a_sweep_hands_its_purges_to_the_kernel_together)
{
    /* purge_batch=0 counts the ranges (one call each); the same pages
     * purged again with batching take a fraction of the calls. The heap
     * first gets volume enough to give every class its own pages (a young
     * one pairs them, heap.c), so the 36 sizes take 36 pages. */
    volume_done(volume());
    cr_assert_eq(tally_option_set("purge_batch", "0"), 0);
    uint64_t one_by_one = calls_to_purge_pages(36);
    cr_assert_geq(one_by_one, 12, "36 pages purged in %llu calls",
                  (unsigned long long)one_by_one);
    if (!kernel_takes_purge_lists())
        cr_skip_test("this kernel purges one range per call");
    cr_assert_eq(tally_option_set("purge_batch", "1"), 0);
    uint64_t together = calls_to_purge_pages(36);
    cr_assert_leq(together * 4, one_by_one, "%llu calls batched, %llu one by one",
                  (unsigned long long)together, (unsigned long long)one_by_one);
}

/* OS pages of [p, p + n) in RAM (helpers.h), the count asserted taken. */
static int resident_pages(const void *p, size_t n)
{
    size_t r = pages_in_ram(p, n);
    cr_assert_neq(r, (size_t)-1, "mincore of %zu bytes at %p failed", n, p);
    return (int)r;
}

/* The inside pages of a medium block of n bytes at p that are resident. */
static int resident_inside(const char *p, size_t n)
{
    uintptr_t lo = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)p + n) & ~(uintptr_t)4095;
    return resident_pages((const void *)lo, hi - lo);
}

/* Allocates as a live program would for about ms milliseconds. */
static void allocate_for_ms(int ms)
{
    for (int t = 0; t < ms; t += 5) {
        allocate_a_little(2000);
        sleep_ms(5);
    }
}

Test(purge, a_freed_medium_block_keeps_its_pages_until_it_stays_free_from_one_look_to_the_next)
{
    /* purge_delay 1000: a sweep every 50 ms, a medium page's free blocks
     * looked at every 250 ms. Purged at the first sweep after the free, a
     * block a program reused within tens of ms faulted in again (mstress:
     * 35k faults a run against 5k). */
    cr_assert_eq(tally_option_set("purge_delay", "1000"), 0);
    size_t n = 28672;           /* a medium block: below SPAN_MIN */
    char *keep = malloc(n), *p = malloc(n);
    cr_assert(keep && p);
    memset(keep, 1, n);
    memset(p, 2, n);
    int inside = resident_inside(p, n);
    cr_assert_geq(inside, 6);
    free(p);
    allocate_for_ms(120);   /* two sweeps or more */
    cr_assert_eq(resident_inside(p, n), inside,
                 "the block's pages went back within 120 ms of its free");
    int now = inside;
    for (int round = 0; round < 40 && now > 1; round++) {
        allocate_for_ms(50);
        now = resident_inside(p, n);
    }
    cr_assert_leq(now, 1, "the block stayed free for 2 s and still holds %d of %d pages", now,
                  inside);
    free(keep);
}

struct takeover { int warm, after; unsigned char last; };

/* In a thread of its own, so a fresh heap whose pages are all its own
 * decides where the block goes (the runner's thread has pages of many
 * classes already). */
static void *take_over_a_warm_page(void *arg)
{
    enum { N = 32 * 32, SIZE = 2048, OTHER = 7000 };
    struct takeover *t = arg;
    static void *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(SIZE);
        memset(v[i], 0x55, SIZE);
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
    sleep_ms(600);
    /* A class with no page yet: its slow path sweeps (retiring the empty
     * pages) and takes a retired page over. */
    unsigned char *p = malloc(OTHER);
    memset(p, 0x66, OTHER);
    const unsigned char *page = (const unsigned char *)((uintptr_t)p & ~(uintptr_t)0xffff);
    t->warm = resident_pages(page, 65536);
    malloc_trim(0);
    t->after = resident_pages(page, 65536);
    t->last = p[OTHER - 1];
    free(p);
    return NULL;
}

Test(purge, a_small_page_taken_over_by_another_class_gives_back_the_rest)
{
    /* 32 small pages of 2 KiB blocks, written, freed and retired at the
     * next small-page sweep (every 500 ms with a delay of 1 s), still warm
     * (purged after 1 s); a 7,000 B block takes one of them over. What the
     * first class wrote beyond the second's reach goes back at the sweep:
     * a fresh run may not cover it, or the sweep would leave it alone. */
    cr_assert_eq(tally_option_set("purge_delay", "1000"), 0);
    struct takeover t = { 0 };
    run_in_thread(take_over_a_warm_page, &t);
    cr_assert_geq(t.warm, 12, "the block went to a warm page (%d OS pages in RAM)", t.warm);
    cr_assert_leq(t.after, 4, "%d -> %d OS pages in RAM", t.warm, t.after);
    cr_assert_eq(t.last, 0x66);
}

/* A thread whose mallocs all stay on the fast path (one size, served by
 * its current page) never reached a sweep, so what it had freed stayed:
 * redis after FLUSHALL, serving small requests, kept 198 MB. Every
 * HEAP_TICK blocks the fast path hands out, it now looks at the clock. */
static void fast_path_only(size_t size)
{
    size_t n;
    void **v = build_peak(size, &n);
    void *volatile keep = malloc(100);   /* the current page of 100 B's class */
    long full = rss_kib();
    free_all(v, n);
    long now = full;
    for (int round = 0; round < 400 && now > full - 150 * 1024; round++) {
        for (int k = 0; k < 1000; k++) {
            void *volatile p = malloc(100);
            free(p);
        }
        sleep_ms(5);
        now = rss_kib();
    }
    free(keep);
    cr_assert_lt(now, full - 150 * 1024, "%zu B blocks: RSS %ld -> %ld KiB", size, full, now);
}

Test(purge, a_thread_on_the_fast_path_gives_back_what_it_freed, .timeout = 30)
{
    fast_path_only(30000);
    fast_path_only(1000);
}

/* Sweeps a few times (purge_delay is small): the sweep runs on the slow
 * path of another class. */
static void sweep_a_few_times(void)
{
    for (int round = 0; round < 10; round++) {
        sleep_ms(5);
        allocate_a_little(3000);
        allocate_a_little(5000);
    }
}

/* The sweep purged a page's free memory once, then looked again only when
 * `used` fell below what that purge saw: blocks handed out and freed
 * since, back to the same count, stayed resident for good. */
Test(purge, a_sparse_page_refilled_and_emptied_again_gives_back_again)
{
    enum { N = 10000, SIZE = 2000 };
    static unsigned char *v[N];
    cr_assert_eq(tally_option_set("purge_delay", "8"), 0);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < N; i++) {
            if (!v[i]) {
                v[i] = malloc(SIZE);
                memset(v[i], round + 1, SIZE);
            }
        }
        long full = rss_kib();
        for (int i = 0; i < N; i++) {
            if (i % 10) {
                free(v[i]);
                v[i] = NULL;
            }
        }
        sweep_a_few_times();
        long now = rss_kib();
        cr_assert_lt(now, full - N * SIZE / 2048, "round %d: RSS %ld -> %ld KiB", round, full, now);
    }
    for (int i = 0; i < N; i += 10)
        free(v[i]);
}

/* A small page that turns sparse while the program runs gives its free OS
 * pages back only when the next sweep of small pages finds it sparse still:
 * one that churns around half full was purged and faulted back in over
 * and over (rssfoot: 42-61k faults, 22k now). With purge_delay at 4 s,
 * small pages are swept every 2 s: the sweep after the frees marks the
 * page, the one after that purges it. */
static uint64_t purged_bytes_now(void)
{
    struct tally_stats s = { .size = sizeof s };
    cr_assert_eq(tally_stats_get(&s), 0);
    return s.purged_bytes;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void run_until(double t)
{
    while (seconds_now() < t) {
        allocate_a_little(3000);
        sleep_ms(10);
    }
}

Test(purge, a_sparse_page_is_purged_once_it_stays_sparse_to_the_next_sweep, .timeout = 60)
{
    enum { N = 10000, SIZE = 2000 };
    static unsigned char *v[N];
    cr_assert_eq(tally_option_set("purge_delay", "4000"), 0);
    double t0 = seconds_now();
    run_until(t0 + 0.5);        /* a sweep of small pages: from now on 2 s apart */
    for (int i = 0; i < N; i++) {
        v[i] = malloc(SIZE);
        memset(v[i], 1, SIZE);
    }
    for (int i = 0; i < N; i++) {
        if (i % 10) {
            free(v[i]);
            v[i] = NULL;
        }
    }
    uint64_t before = purged_bytes_now();
    run_until(t0 + 3.2);        /* one more: it finds the pages sparse */
    uint64_t first = purged_bytes_now() - before;
    run_until(t0 + 5.8);        /* and the next one purges them */
    uint64_t second = purged_bytes_now() - before;
    cr_assert_lt(first, (uint64_t)N * SIZE / 8, "%llu bytes purged at the first look",
                 (unsigned long long)first);
    cr_assert_gt(second, (uint64_t)N * SIZE / 2, "%llu bytes purged by the second look",
                 (unsigned long long)second);
    for (int i = 0; i < N; i += 10)
        free(v[i]);
}

/* The medium-page cases: MEDIUM_N blocks of MEDIUM_SIZE beside one kept
 * block that keeps their page from retiring, with a short purge delay.
 * Below SPAN_MIN (32 KiB): above it, blocks are span blocks while the span
 * gate is open (alloc/span.h). MEDIUM_PAGES: the OS pages checked past
 * each block's first. */
enum { MEDIUM_N = 8, MEDIUM_SIZE = 28672, MEDIUM_PAGES = 6 };

static void *keep_a_medium_page(void)
{
    cr_assert_eq(tally_option_set("purge_delay", "8"), 0);
    void *keep = malloc(MEDIUM_SIZE);
    memset(keep, 1, MEDIUM_SIZE);
    return keep;
}

/* Allocates v[0..MEDIUM_N) and fills each from byte `from` on. */
static void fill_medium_blocks(unsigned char **v, int byte, size_t from)
{
    for (int i = 0; i < MEDIUM_N; i++) {
        v[i] = malloc(MEDIUM_SIZE);
        memset(v[i] + from, byte, MEDIUM_SIZE - from);
    }
}

/* OS pages of v's blocks in RAM, past each block's first page. */
static int medium_blocks_resident(unsigned char **v)
{
    int n = 0;
    for (int i = 0; i < MEDIUM_N; i++)
        n += resident_pages(v[i] + 4096, MEDIUM_PAGES * 4096);
    return n;
}

Test(purge, a_medium_page_gives_back_blocks_reused_since_its_last_purge)
{
    enum { N = MEDIUM_N };
    void *volatile keep = keep_a_medium_page();
    unsigned char *v[N];
    int after[2] = { 0, 0 };
    for (int round = 0; round < 2; round++) {
        fill_medium_blocks(v, round + 2, 0);
        for (int i = 0; i < N; i++)
            free(v[i]);
        sweep_a_few_times();
        after[round] = medium_blocks_resident(v);
    }
    free(keep);
    cr_assert_leq(after[0], N, "first round: %d OS pages in RAM", after[0]);
    cr_assert_leq(after[1], N, "second round: %d OS pages in RAM", after[1]);
}

Test(purge, a_medium_block_reused_without_its_second_word_written_is_purged_again)
{
    /* The sweep purges the inside of a medium page's free blocks and
     * marks them in their second word. A block handed out again and
     * filled from byte 16 on kept that mark, and once freed the sweep
     * skipped it: its pages stayed resident for good. */
    enum { N = MEDIUM_N };
    void *volatile keep = keep_a_medium_page();
    unsigned char *v[N];
    fill_medium_blocks(v, 2, 0);
    for (int i = 0; i < N; i++)
        free(v[i]);
    sweep_a_few_times();
    fill_medium_blocks(v, 3, 16);
    int written = medium_blocks_resident(v);
    for (int i = 0; i < N; i++)
        free(v[i]);
    sweep_a_few_times();
    int after = medium_blocks_resident(v);
    free(keep);
    cr_assert_eq(written, N * MEDIUM_PAGES);
    cr_assert_leq(after, N, "%d -> %d OS pages in RAM", written, after);
}

/* Allocates n blocks of `size` into v and writes each whole; returns the
 * faults the writes took (the pages fault there, if anywhere). */
static long allocate_written(unsigned char **v, int n, size_t size, int byte)
{
    for (int i = 0; i < n; i++)
        cr_assert_not_null(v[i] = malloc(size));
    long f0 = minor_faults();
    for (int i = 0; i < n; i++)
        memset(v[i], byte, size);
    return minor_faults() - f0;
}

static void free_each(unsigned char **v, int n)
{
    for (int i = 0; i < n; i++)
        free(v[i]);
}

/* Sleeps past a sweep interval and allocates, so that the sweep retires
 * the pages emptied since the last one (purge_delay 10 s: a sweep every
 * 500 ms, and retired pages kept). */
static void let_a_sweep_retire(void)
{
    for (int i = 0; i < 3; i++) {
        sleep_ms(300);
        allocate_a_little(24);
        allocate_a_little(100000);
    }
}

/* A block of a medium class of its own, which takes a page: the heap's
 * last page went to a medium class, as once a medium phase is under way
 * (a segment emptied since the last sweep changes kind only then). */
static void *start_a_medium_phase(void)
{
    void *p = malloc(20000);
    cr_assert_not_null(p);
    memset(p, 7, 20000);
    return p;
}

/* Frees 24 MiB of written small blocks and allocates 12 MiB of medium
 * ones, then frees those and allocates 12 MiB of small ones, asking a
 * sweep in between when `swept`: the emptied segments are taken over
 * where they lie instead of fresh ones being faulted in beside them
 * (about 3,000 faults each way without). 24 MiB first, so that three of
 * the small segments hold nothing else (the harness's own small blocks
 * keep the first one). */
static void swap_kinds(bool swept)
{
    enum { SMALL_N = 3000, SMALL = 4000, MEDIUM_N = 1000, MEDIUM = 12000 };
    cr_assert_eq(tally_option_set("purge_delay", "10000"), 0);
    static unsigned char *s[2 * SMALL_N], *m[MEDIUM_N];
    allocate_written(s, 2 * SMALL_N, SMALL, 1);
    free_each(s, 2 * SMALL_N);
    if (swept)
        let_a_sweep_retire();
    void *started = start_a_medium_phase();
    long medium_faults = allocate_written(m, MEDIUM_N, MEDIUM, 2);
    cr_assert_lt(medium_faults, 1000, "medium blocks faulted %ld pages in beside emptied small pages",
                 medium_faults);
    free_each(m, MEDIUM_N);
    if (swept)
        let_a_sweep_retire();
    long small_faults = allocate_written(s, SMALL_N, SMALL, 3);
    cr_assert_lt(small_faults, 1000, "small blocks faulted %ld pages in beside emptied medium pages",
                 small_faults);
    for (int i = 0; i < SMALL_N; i++)
        cr_assert_eq(s[i][SMALL - 1], 3);
    free_each(s, SMALL_N);
    free(started);
}

Test(purge, an_emptied_segment_of_one_kind_serves_the_other_warm, .timeout = 30)
{
    swap_kinds(true);
}

Test(purge, a_segment_emptied_since_the_last_sweep_serves_the_other_kind, .timeout = 30)
{
    /* Pages the sweep has not retired yet: with purge_delay 10 s it looks
     * every 500 ms and retires small pages every 5 s, and this runs in a
     * few ms. Each phase's first page is fresh (the heap's last page went
     * to the other kind), the rest come from the emptied segments. */
    swap_kinds(false);
}

Test(purge, a_segment_emptied_while_the_kinds_take_turns_stays_with_its_kind, .timeout = 30)
{
    /* 24 MiB of small blocks freed, then a small page taken (a class of
     * its own) and one medium block: the heap's last page went to a small
     * class, so the medium block does not take an emptied small segment,
     * and the same small blocks allocated again find their pages where
     * they were (4 faults; 394 when the medium page took a segment of
     * them, what cost mstress 5% of its peak). */
    enum { SMALL_N = 6000, SMALL = 4000 };
    cr_assert_eq(tally_option_set("purge_delay", "10000"), 0);
    static unsigned char *s[SMALL_N];
    allocate_written(s, SMALL_N, SMALL, 1);
    free_each(s, SMALL_N);
    void *small = malloc(700), *medium = malloc(12000);
    cr_assert(small && medium);
    memset(medium, 2, 12000);
    long faults = allocate_written(s, SMALL_N, SMALL, 3);
    cr_assert_lt(faults, 100, "small blocks faulted %ld pages in again", faults);
    free_each(s, SMALL_N);
    free(medium);
    free(small);
}

Test(purge, an_emptied_small_segment_serves_four_medium_classes, .timeout = 30)
{
    /* 24 MiB of written small blocks freed, a medium phase under way, then
     * one block each of four medium classes: the first class takes an
     * emptied small segment and its first 1 MiB page, and the others the
     * rest of its pages, written already (a medium page that was the whole
     * segment left the other classes to empty segments of their own, and
     * each class's page held the uncarved rest of 4 MiB resident: w_phase's
     * peak 272.5 -> 261 MiB). */
    enum { SMALL_N = 6000, SMALL = 4000 };
    static const size_t sizes[4] = { 9000, 11000, 13000, 15000 };
    cr_assert_eq(tally_option_set("purge_delay", "10000"), 0);
    static unsigned char *s[SMALL_N];
    allocate_written(s, SMALL_N, SMALL, 1);
    free_each(s, SMALL_N);
    void *started = start_a_medium_phase();
    unsigned char *m[4];
    long f0 = minor_faults();
    for (int i = 0; i < 4; i++) {
        cr_assert_not_null(m[i] = malloc(sizes[i]));
        memset(m[i], 5, sizes[i]);
    }
    long faults = minor_faults() - f0;
    /* At most two segments: the emptied segment taken first may have been
     * written only partway (the last one the small blocks reached), and
     * its unwritten pages give way to the next emptied segment's. */
    uintptr_t started_seg = (uintptr_t)started & ~(uintptr_t)SEGMENT_MASK, segs[4];
    int distinct = 0;
    for (int i = 0; i < 4; i++) {
        uintptr_t seg = (uintptr_t)m[i] & ~(uintptr_t)SEGMENT_MASK;
        cr_assert_neq(seg, started_seg,
                      "the %zu B block took the fresh medium segment's page", sizes[i]);
        int k = 0;
        while (k < distinct && segs[k] != seg)
            k++;
        if (k == distinct)
            segs[distinct++] = seg;
    }
    cr_assert_leq(distinct, 2, "four medium classes took %d segments", distinct);
    cr_assert_lt(faults, 4, "writing the blocks faulted %ld pages in", faults);
    for (int i = 0; i < 4; i++)
        free(m[i]);
    free(started);
}

/* The 1 MiB medium page p lies in. */
static uintptr_t medium_page_of(const void *p)
{
    return (uintptr_t)p & ~(uintptr_t)((1u << 20) - 1);
}

Test(purge, no_memory_another_class_wrote_stays_resident_under_sparse_blocks, .timeout = 30)
{
    /* 40,000 B blocks written on their first page only shut their span
     * gate (span.h): the size is a medium class's then, one that writes
     * sparsely, as are the 100,000 B blocks let_a_sweep_retire allocates
     * and frees unwritten. A page of 12,000 B blocks, written whole (176
     * OS pages) and freed, is retired; a sparse class that takes it over
     * purges what they wrote first (heap.c, heap_take_written), so that
     * memory does not stay resident under blocks that write a page each
     * at most (the freed ones their free-list link). Taken over without
     * the purge, 184 of the page's 256 OS pages stayed resident here, and
     * mstress peaked about 10% higher. */
    enum { N = 60 };
    cr_assert_eq(tally_option_set("purge_delay", "10000"), 0);
    for (int i = 0; i < 64; i++) {
        char *p = malloc(40000);
        cr_assert_not_null(p);
        p[0] = 1;
        free(p);
    }
    static unsigned char *m[N];
    allocate_written(m, N, 12000, 1);
    uintptr_t page = medium_page_of(m[0]);
    free_each(m, N);
    let_a_sweep_retire();
    /* Eight: a shut gate still sends one request in 16 to the spans. */
    char *sparse[8];
    int inside = 0;
    for (int i = 0; i < 8; i++) {
        cr_assert_not_null(sparse[i] = malloc(40000));
        sparse[i][0] = 2;
        inside += medium_page_of(sparse[i]) == page;
    }
    int resident = 0;
    for (int k = 0; k < 256; k += 64)
        resident += resident_pages((const void *)(page + (uintptr_t)k * 4096), 64 * 4096);
    cr_assert_lt(resident, 32, "%d of the 12,000 B blocks' page's 256 OS pages are "
                 "resident (%d of the 40,000 B blocks there)", resident, inside);
    for (int i = 0; i < 8; i++)
        free(sparse[i]);
}

Test(purge, a_medium_page_still_carving_keeps_what_the_other_kind_wrote, .timeout = 30)
{
    /* Small segments emptied of written blocks become medium pages, 1 MiB
     * written each. Sweeps come while they carve, a batch of blocks
     * between two (purge_delay 100 ms: a look every 5 ms); a page that
     * carved since the last look keeps what lies ahead of its carving, so
     * the blocks do not fault it in again (about 2,400 faults if every
     * sweep trims it). */
    enum { SMALL_N = 3000, SMALL = 4000, BATCHES = 20, PER = 50, MEDIUM = 12000 };
    cr_assert_eq(tally_option_set("purge_delay", "100"), 0);
    static unsigned char *s[2 * SMALL_N], *m[BATCHES * PER];
    allocate_written(s, 2 * SMALL_N, SMALL, 1);
    free_each(s, 2 * SMALL_N);
    void *started = start_a_medium_phase();
    long faults = 0;
    for (int b = 0; b < BATCHES; b++) {
        faults += allocate_written(m + b * PER, PER, MEDIUM, 2);
        sleep_ms(6);
        for (int k = 0; k < 5; k++)
            allocate_a_little(24);      /* past a tick: the sweep is due */
    }
    cr_assert_lt(faults, 1000, "medium blocks faulted %ld pages in where small ones were written",
                 faults);
    free_each(m, BATCHES * PER);
    free(started);
}
