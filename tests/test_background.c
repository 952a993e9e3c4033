/*
 * test_background.c - the background thread (option background=1): a
 * process that freed a peak and then makes no call into tally gets its
 * memory back; the thread is named, leaves when switched off, and a fork
 * child gets one of its own.
 */
#include "helpers.h"
#include "tally.h"
#include <criterion/criterion.h>
#include <dirent.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>

#define BLOCK 1000u

/* Threads of this process named "tally-purge" (/proc, no malloc: opendir
 * allocates 32 KiB and more, a span block's slow path, and in a fork
 * child that starts the child's purge thread before the count is read). */
static int purge_threads(void)
{
    int n = 0;
    int dir = open("/proc/self/task", O_RDONLY | O_DIRECTORY);
    if (dir < 0)
        return 0;
    char buf[4096];
    long got;
    while ((got = syscall(SYS_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < got;) {
            struct dirent64 *e = (struct dirent64 *)(buf + off);
            off += e->d_reclen;
            if (e->d_name[0] == '.')
                continue;
            char path[64], name[32] = { 0 };
            snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
            int fd = open(path, O_RDONLY);
            if (fd < 0)
                continue;
            ssize_t len = read(fd, name, sizeof name - 1);
            close(fd);
            if (len > 0 && strncmp(name, "tally-purge\n", 12) == 0)
                n++;
        }
    }
    close(dir);
    return n;
}

/* Polls for up to `ms` until purge_threads() == want. */
static bool purge_threads_become(int want, long ms)
{
    for (long t = 0; t < ms; t += 20) {
        if (purge_threads() == want)
            return true;
        sleep_ms(20);
    }
    return purge_threads() == want;
}

/* Allocates and touches PEAK_BYTES of BLOCK-byte blocks (build_peak), frees them all, then
 * makes no call into tally while it watches its RSS for `ms`. Returns how
 * much of the peak went back; *peak_out is the RSS at the peak. */
static long peak_free_and_wait(long ms, long *peak_out)
{
    size_t n;
    void **v = build_peak(BLOCK, &n);
    long peak = rss_kib();
    free_all(v, n);
    munmap(v, n * sizeof *v);
    long low = peak;
    for (long t = 0; t < ms && low > peak - 150 * 1024; t += 50) {
        sleep_ms(50);
        long now = rss_kib();
        if (now < low)
            low = now;
    }
    *peak_out = peak;
    return peak - low;
}

Test(background, a_quiet_process_gets_back_what_it_freed, .timeout = 30)
{
    cr_assert_eq(tally_option_set("background", "1"), 0);
    long peak;
    long gone = peak_free_and_wait(3000, &peak);
    cr_assert_gt(peak, 150 * 1024, "the peak is not resident: %ld KiB", peak);
    cr_assert_gt(gone, 150 * 1024, "3 s after freeing a 192 MiB peak, %ld KiB went back",
                 gone);
}

Test(background, the_thread_is_named_and_leaves_when_switched_off, .timeout = 30)
{
    cr_assert_eq(purge_threads(), 0, "no thread unless asked for");
    cr_assert_eq(tally_option_set("background", "1"), 0);
    cr_assert(purge_threads_become(1, 2000), "no tally-purge thread after background=1");
    cr_assert_eq(tally_option_set("background", "1"), 0);
    sleep_ms(100);
    cr_assert_eq(purge_threads(), 1, "setting it twice starts a second thread");
    cr_assert_eq(tally_option_set("background", "0"), 0);
    cr_assert(purge_threads_become(0, 2000), "the thread is still there after background=0");
    cr_assert_eq(tally_option_set("background", "1"), 0);
    cr_assert(purge_threads_become(1, 2000), "background=1 again started no thread");
}

/* The child of a fork has no background thread; its first slow path
 * starts one, and it does its work there too. */
static void child_after_fork(void *arg)
{
    (void)arg;
    if (purge_threads() != 0) {
        fprintf(stderr, "the child inherited a thread?\n");
        _exit(2);
    }
    void *tmp[300];             /* more than a page holds: slow paths */
    for (int i = 0; i < 300; i++)
        tmp[i] = malloc(3000);
    for (int i = 0; i < 300; i++)
        free(tmp[i]);
    if (!purge_threads_become(1, 2000)) {
        fprintf(stderr, "no tally-purge thread in the child\n");
        _exit(3);
    }
    long peak;
    long gone = peak_free_and_wait(3000, &peak);
    if (gone < 150 * 1024) {
        fprintf(stderr, "the child got back %ld KiB of %ld\n", gone, peak);
        _exit(4);
    }
}

Test(background, a_fork_child_starts_its_own_thread, .timeout = 30)
{
    cr_assert_eq(tally_option_set("background", "1"), 0);
    cr_assert(purge_threads_become(1, 2000));
    struct child_result r = run_in_child(child_after_fork, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0, "child: status %d, %s",
              r.status, r.err);
}

/* A fork child whose first slow path is on the orphan heap: a thread that
 * exits, with a key destructor that allocates after tally's (its heap is
 * gone, so the orphan heap serves it, under that heap's lock). The purge
 * thread it starts there needs a fresh stack, whose TLS array glibc
 * allocates with calloc, which goes to the orphan heap again. */
static pthread_key_t late_key;
static void *kept_block;

static void *leave_a_free_block(void *arg)
{
    (void)arg;
    kept_block = malloc(100);   /* the page stays current, one block free */
    free(malloc(100));
    return NULL;
}

static void allocate_late(void *v)
{
    (void)v;
    free(malloc(100));
}

static void *exit_with_late_destructor(void *arg)
{
    (void)arg;
    pthread_setspecific(late_key, (void *)1);
    free(malloc(100));          /* the parked heap's free block: no slow path */
    return NULL;
}

static void *wait_on_pipe(void *arg)
{
    char c;
    read(*(int *)arg, &c, 1);
    return NULL;
}

static int max_tls_modid(struct dl_phdr_info *info, size_t size, void *data)
{
    (void)size;
    if (info->dlpi_tls_modid > *(size_t *)data)
        *(size_t *)data = info->dlpi_tls_modid;
    return 0;
}

static void child_orphan_first(void *arg)
{
    (void)arg;
    alarm(5);                   /* a deadlock ends as SIGALRM */
    pthread_key_create(&late_key, allocate_late);
    /* Threads that hold every stack the child inherited in glibc's cache,
     * so that the next thread needs a fresh one. */
    static int fds[2];
    if (pipe(fds) != 0)
        _exit(5);
    for (int i = 0; i < 8; i++) {
        pthread_t b;
        pthread_create(&b, NULL, wait_on_pipe, &fds[0]);
    }
    pthread_t t;
    pthread_create(&t, NULL, exit_with_late_destructor, NULL);
    pthread_join(t, NULL);
}

Test(background, a_fork_child_whose_first_slow_path_is_on_a_shared_heap, .timeout = 30)
{
    cr_assert_eq(tally_option_set("background", "1"), 0);
    cr_assert(purge_threads_become(1, 2000));
    /* A parked heap with a free block of 100 B in its current page; a
     * small stack, which fits no default thread once cached. */
    pthread_attr_t small;
    pthread_attr_init(&small);
    pthread_attr_setstacksize(&small, 64 << 10);
    pthread_t t;
    cr_assert_eq(pthread_create(&t, &small, leave_a_free_block, NULL), 0);
    pthread_join(t, NULL);
    /* Free blocks of glibc's TLS array size on this thread's current page,
     * so that the child's thread creations take no slow path. */
    size_t modid = 0;
    dl_iterate_phdr(max_tls_modid, &modid);
    size_t dtv = (modid + 16) * 16;
    static void *v[33];
    for (int i = 0; i < 33; i++)
        v[i] = malloc(dtv);
    for (int i = 1; i < 33; i++)
        free(v[i]);
    struct child_result r = run_in_child(child_orphan_first, NULL);
    cr_assert(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0,
              "child: status %d (signal %d), %s", r.status, child_signal(&r), r.err);
}

static bool still_mapped(void *p)
{
    unsigned char v;
    return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) == 0;
}

/* A large block freed while the thread dozes: its poke wakes the thread,
 * and the entry must not then wait out a whole doze (up to 10 s) but go
 * back once it expires (LARGE_CACHE_EXPIRE_MS, 1 s). */
Test(background, a_large_block_freed_while_it_dozes_goes_back_in_time, .timeout = 30)
{
    cr_assert_eq(tally_option_set("background", "1"), 0);
    size_t size = 2u << 20;
    void *p = malloc(size);
    memset(p, 1, size);
    free(p);                    /* a large free, then a large request: */
    p = malloc(size);           /* the cache is armed */
    memset(p, 1, size);
    sleep_ms(6000);             /* quiet: the thread dozes (4 s by now) */
    free(p);
    long waited = 0;
    while (still_mapped(p) && waited < 3000) {
        sleep_ms(20);
        waited += 20;
    }
    cr_assert(!still_mapped(p), "the cached block is still mapped 3 s after its free");
}

Test(background, the_option_reads_back_and_rejects_other_values)
{
    uint64_t v = 7;
    cr_assert_eq(tally_option_get("background", &v), 0);
    cr_assert_eq(v, 0);
    cr_assert_eq(tally_option_set("background", "2"), -1);
    cr_assert_eq(purge_threads(), 0);
}
