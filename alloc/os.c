/*
 * os.c - mmap, munmap, mremap and madvise, behind the contract in os.h.
 *
 * Nothing else in tally includes <sys/mman.h>. Alignment is obtained by
 * trying the caller's hint, if any, then the plain size (the kernel often
 * returns a suitably aligned range for large requests), and only then
 * over-mapping and trimming, so the common case costs one syscall.
 */
#define _GNU_SOURCE
#include "os.h"

#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#define RUNNING_ON_VALGRIND 0
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <string.h>

/* ThreadSanitizer follows munmap but not mremap: a range that an mremap
 * moves away from or shrinks off keeps the accesses made to it, and what
 * is mapped there next without passing TSan's mmap interceptor (another
 * mapping grown in place over it) was reported as racing with them: the
 * TSan driver, once in about 15 runs, had a new large block's header
 * write at the address of a header another thread read before its block
 * moved away. The kernel orders every change to the address space (one
 * lock per process), so the model is that order: a thread that vacates a
 * range with mremap releases, and one that gains a range by growing in
 * place acquires, one sync object. (AnnotateNewMemory, used before, is a
 * no-op in GCC 12's runtime: a test program still had its race reported
 * after it.) */
#if defined(__SANITIZE_THREAD__)
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
static char os_vm_order;
#define os_vacated(p, size) ((void)(p), (void)(size), __tsan_release(&os_vm_order))
#define os_gained() __tsan_acquire(&os_vm_order)
#else
#define os_vacated(p, size) ((void)(p), (void)(size))
#define os_gained() ((void)0)
#endif

static _Atomic uint64_t n_calls[OS_CALLS], ns_calls[OS_CALLS];
static _Atomic uint64_t bytes_mapped, bytes_purged;
static _Atomic long fail_countdown;
HIDDEN bool os_time_calls;

/* Brackets one kernel call: counts it, and times it in timing mode. */
static uint64_t os_call_begin(void)
{
    return __atomic_load_n(&os_time_calls, __ATOMIC_RELAXED) ? os_now_ns() : 0;
}

static void os_call_end(enum os_call c, uint64_t t0)
{
    atomic_fetch_add_explicit(&n_calls[c], 1, memory_order_relaxed);
    if (t0)
        atomic_fetch_add_explicit(&ns_calls[c], os_now_ns() - t0, memory_order_relaxed);
}

/* Test hook: true when this call must pretend the kernel said no. */
static bool os_should_fail(void)
{
    long n = atomic_load_explicit(&fail_countdown, memory_order_relaxed);
    if (likely(n == 0))
        return false;
    return atomic_fetch_sub(&fail_countdown, 1) == 1;
}

void os_fail_after(long n) { atomic_store(&fail_countdown, n < 0 ? 0 : n); }

/* flags: MAP_NORESERVE for address space only, else 0 (see os.h). */
static void *os_mmap_raw(void *hint, size_t size, int flags)
{
    uint64_t t0 = os_call_begin();
    void *p = mmap(hint, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags, -1, 0);
    os_call_end(OS_MMAP, t0);
    return p == MAP_FAILED ? NULL : p;
}

static void *os_map_at(void *hint, size_t size, int flags)
{
    if (os_should_fail())
        return NULL;
    void *p = os_mmap_raw(hint, size, flags);
    if (p)
        atomic_fetch_add_explicit(&bytes_mapped, size, memory_order_relaxed);
    return p;
}

void *os_map(size_t size) { return os_map_at(NULL, size, MAP_NORESERVE); }

void *os_map_table(size_t size) { return os_mmap_raw(NULL, size, MAP_NORESERVE); }

void os_unmap(void *p, size_t size)
{
    uint64_t t0 = os_call_begin();
    munmap(p, size);
    os_call_end(OS_MUNMAP, t0);
    atomic_fetch_sub_explicit(&bytes_mapped, size, memory_order_relaxed);
}

/* The kernel takes a hint that is free as it is; anything else (taken, or
 * unaligned) falls back to the plain try and then to over-mapping. */
static void *map_aligned_at(void *hint, size_t size, size_t align, int flags)
{
    if (size + align < size)
        return NULL;
    if (hint) {
        void *q = os_map_at(hint, size, flags);
        if (!q || ((uintptr_t)q & (align - 1)) == 0)
            return q;
        os_unmap(q, size);
    }
    void *p = os_map_at(NULL, size, flags);
    if (!p || ((uintptr_t)p & (align - 1)) == 0)
        return p;
    os_unmap(p, size);
    char *raw = os_map_at(NULL, size + align, flags);
    if (!raw)
        return NULL;
    char *aligned = (char *)align_up((uintptr_t)raw, align);
    size_t head = (size_t)(aligned - raw), tail = align - head;
    if (head)
        os_unmap(raw, head);
    if (tail)
        os_unmap(aligned + size, tail);
    return aligned;
}

void *os_map_aligned(size_t size, size_t align) { return map_aligned_at(NULL, size, align, 0); }

void *os_reserve_aligned_at(void *hint, size_t size, size_t align)
{
    return map_aligned_at(hint, size, align, MAP_NORESERVE);
}

void os_mark_defined(void *p, size_t size)
{
    VALGRIND_MAKE_MEM_DEFINED(p, size);
}

void os_protect(void *p, size_t size, bool guard)
{
    mprotect(p, size, guard ? PROT_NONE : PROT_READ | PROT_WRITE);
}

static void os_purge_one(void *p, size_t size)
{
    uint64_t t0 = os_call_begin();
    madvise(p, size, MADV_DONTNEED);
    os_call_end(OS_MADVISE, t0);
    atomic_fetch_add_explicit(&bytes_purged, size, memory_order_relaxed);
}

/* ---- batched purges -------------------------------------------------------
 * Each madvise(MADV_DONTNEED) flushes the range from the TLB of every CPU
 * running another thread of the process: an interrupt to each, which on
 * this VM made one call cost about 25 us with a second thread running.
 * process_madvise() takes a list of ranges, and a recent kernel flushes
 * once for all of them (6.18 here: 16 ranges 66 us, against 404 us as 16
 * calls). A kernel that refuses it (older ones know no PIDFD_SELF, or no
 * MADV_DONTNEED there) is not asked again; the ranges go one call each. */

#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#define OS_PIDFD_SELF (-10001)   /* PIDFD_SELF_THREAD_GROUP: this process */

_Static_assert(sizeof(struct os_range) == sizeof(struct iovec) &&
               offsetof(struct os_range, p) == offsetof(struct iovec, iov_base) &&
               offsetof(struct os_range, size) == offsetof(struct iovec, iov_len),
               "os_range is an iovec");

static bool purge_list_refused;
static __thread struct os_purge_batch *tls_batch TLS_IE;

static void os_purge_list(struct os_range *r, unsigned n)
{
    /* valgrind does not know the call (it warns, then fails it). */
    if (n > 1 && !__atomic_load_n(&purge_list_refused, __ATOMIC_RELAXED) &&
        !RUNNING_ON_VALGRIND) {
        int saved = errno;   /* free() must leave errno alone (POSIX 2024) */
        uint64_t t0 = os_call_begin();
        long done = syscall(SYS_process_madvise, OS_PIDFD_SELF, (struct iovec *)r,
                            (size_t)n, MADV_DONTNEED, 0u);
        os_call_end(OS_MADVISE, t0);
        if (done < 0) {
            /* Not this kernel's call (no PIDFD_SELF, no MADV_DONTNEED
             * there, or a filter): never again. Anything else: this once. */
            if (errno == EBADF || errno == EINVAL || errno == ENOSYS || errno == EPERM)
                __atomic_store_n(&purge_list_refused, true, __ATOMIC_RELAXED);
            done = 0;
        }
        errno = saved;
        /* What it did not get to (an error part way) goes one by one; a
         * range done in part is simply purged again. */
        while (n && (size_t)done >= r->size) {
            atomic_fetch_add_explicit(&bytes_purged, r->size, memory_order_relaxed);
            done -= (long)r->size;
            r++;
            n--;
        }
    }
    for (unsigned i = 0; i < n; i++)
        os_purge_one(r[i].p, r[i].size);
}

void os_purge(void *p, size_t size)
{
    struct os_purge_batch *b = tls_batch;
    if (!b) {
        os_purge_one(p, size);
        return;
    }
    b->r[b->n++] = (struct os_range){ p, size };
    if (b->n == OS_PURGE_BATCH)
        os_purge_flush();
}

void os_purge_batch_open(struct os_purge_batch *b)
{
    b->n = 0;
    if (!tls_batch)
        tls_batch = b;
}

void os_purge_flush(void)
{
    struct os_purge_batch *b = tls_batch;
    if (b && b->n) {
        os_purge_list(b->r, b->n);
        b->n = 0;
    }
}

void os_purge_batch_close(struct os_purge_batch *b)
{
    if (tls_batch != b)
        return;
    os_purge_flush();
    tls_batch = NULL;
}

/* One mremap of [p, p + size) onto dst: 0, or the errno. */
static int os_move_once(void *p, size_t size, void *dst)
{
    if (os_should_fail())
        return ENOMEM;
    uint64_t t0 = os_call_begin();
    void *q = mremap(p, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
    os_call_end(OS_MREMAP, t0);
    if (q == MAP_FAILED)
        return errno;
    os_vacated(p, size);
    return 0;
}

/* The kernel moves only a range inside one of its mappings (EFAULT
 * otherwise), and a range tally glued together spans one per piece: such a
 * range moves half by half. Whatever cannot move is copied (keep) or
 * dropped, then unmapped, so p's range is gone either way. */
void os_move_into(void *p, size_t size, void *dst, bool keep)
{
    int err = os_move_once(p, size, dst);
    if (err == 0) {
        /* dst's pages were already counted as mapped; p's range is gone. */
        atomic_fetch_sub_explicit(&bytes_mapped, size, memory_order_relaxed);
        return;
    }
    if (err == EFAULT && size > OS_PAGE) {
        size_t half = (size / 2) & ~(size_t)(OS_PAGE - 1);
        os_move_into(p, half, dst, keep);
        os_move_into((char *)p + half, size - half, (char *)dst + half, keep);
        return;
    }
    if (keep)
        memcpy(dst, p, size);
    os_unmap(p, size);
}

/* Resizes [p, p + old_size) where it is, through its last kernel mapping
 * (`last` bytes in) when it grows: only that one can. */
static bool os_resize_in_place(void *p, size_t old_size, size_t new_size, size_t last)
{
    size_t from = new_size > old_size ? last : 0;
    uint64_t t0 = os_call_begin();
    void *q = mremap((char *)p + from, old_size - from, new_size - from, 0);
    os_call_end(OS_MREMAP, t0);
    if (q == MAP_FAILED)
        return false;
    if (new_size < old_size)
        os_vacated((char *)p + new_size, old_size - new_size);
    else
        os_gained();
    atomic_fetch_add_explicit(&bytes_mapped, new_size - old_size, memory_order_relaxed);
    return true;
}

bool os_grow_in_place(void *p, size_t old_size, size_t new_size, size_t last)
{
    return !os_should_fail() && os_resize_in_place(p, old_size, new_size, last);
}

void *os_remap_aligned(void *p, size_t old_size, size_t new_size, size_t align,
                       size_t last, bool split, enum os_remap_how *how)
{
    if (new_size > old_size && os_should_fail())
        return NULL;
    /* Shrinking always succeeds in place (the kernel unmaps the tail across
     * mappings); growing in place keeps the address and therefore the
     * alignment. */
    *how = OS_REMAP_IN_PLACE;
    if (os_resize_in_place(p, old_size, new_size, last))
        return p;
    if (new_size <= old_size)
        return NULL;
    /* A fresh aligned range of the new size, and the pages moved onto it
     * (MREMAP_FIXED replaces the reservation). Moved and resized in one
     * call the block stays one kernel mapping, which the next growth can
     * extend in place; a range of several goes piece by piece onto the
     * target's head, or is copied when `split` forbids more pieces. */
    void *target = os_map_aligned(new_size, align);
    if (!target)
        return NULL;
    *how = OS_REMAP_ONE;
    void *q = MAP_FAILED;
    if (last == 0) {
        uint64_t t0 = os_call_begin();
        q = mremap(p, old_size, new_size, MREMAP_MAYMOVE | MREMAP_FIXED, target);
        os_call_end(OS_MREMAP, t0);
    }
    if (q != MAP_FAILED) {
        os_vacated(p, old_size);
        atomic_fetch_sub_explicit(&bytes_mapped, old_size, memory_order_relaxed);
    } else if (split) {
        *how = OS_REMAP_PIECES;
        os_move_into(p, old_size, target, true);
    } else {
        memcpy(target, p, old_size);
        os_unmap(p, old_size);
    }
    return target;
}

void os_counters_read(struct os_counters *out)
{
    for (int c = 0; c < OS_CALLS; c++) {
        out->calls[c] = atomic_load(&n_calls[c]);
        out->ns[c] = atomic_load(&ns_calls[c]);
    }
    out->mapped_bytes = atomic_load(&bytes_mapped);
    out->purged_bytes = atomic_load(&bytes_purged);
}

size_t os_resident_per(void *p, size_t size, size_t chunk, uint8_t *counts)
{
    unsigned char vec[1024];
    size_t pages = size / OS_PAGE, per = chunk / OS_PAGE, resident = 0;
    if (counts)
        memset(counts, 0, pages / per);
    for (size_t done = 0; done < pages; done += sizeof vec) {
        size_t n = pages - done < sizeof vec ? pages - done : sizeof vec;
        if (mincore((char *)p + done * OS_PAGE, n * OS_PAGE, vec) != 0)
            break;
        for (size_t i = 0; i < n; i++) {
            resident += vec[i] & 1;
            if (counts)
                counts[(done + i) / per] += vec[i] & 1;
        }
    }
    return resident * OS_PAGE;
}

/* /proc/self/pagemap holds 8 bytes a page; these two bits say the page
 * holds data (the frame numbers are hidden from unprivileged readers; the
 * bits are not). A page with neither was never written since it was
 * mapped or purged with MADV_DONTNEED, and reads as zero. mincore would
 * not do: it calls a swapped-out page absent, and that page holds data. */
#define PM_PRESENT ((uint64_t)1 << 63)
#define PM_SWAPPED ((uint64_t)1 << 62)
#define PM_BATCH   256          /* entries a read (1 MiB of pages): 2 KiB of stack */

/* Set once pagemap could not be opened or read (no /proc, a sandbox), or
 * did not call a page present that is (an emulated /proc that reads as
 * zeros would have every block left uncleared): every later clear is a
 * plain memset, without the failing call. pagemap_trusted: that check
 * passed once in this process. */
static bool pagemap_refused, pagemap_trusted;

/* The file's calls go to the kernel directly, not through libc's
 * wrappers, which a program or a preloaded library may interpose (a
 * path-rewriting open, one that allocates and comes back into calloc),
 * as jemalloc reads its /proc files. */
WARM_TEXT static ssize_t pagemap_read(int fd, void *buf, size_t n, uintptr_t page)
{
    return syscall(SYS_pread64, fd, buf, n, (off_t)(page * sizeof(uint64_t)));
}

/* Whether fd's entries can be believed: the page of `probe`, which this
 * writes, must read as present. */
WARM_TEXT static bool pagemap_believable(int fd, volatile uint64_t *probe)
{
    *probe = 0;
    uint64_t entry = 0;
    return pagemap_read(fd, &entry, sizeof entry, (uintptr_t)probe / OS_PAGE) == (ssize_t)sizeof entry &&
           (entry & PM_PRESENT);
}

/* A program that writes its calloc'd blocks whole gains nothing from the
 * probe and pays its calls: about 8 us for the open, a read and the close,
 * where a resident 8 MiB clears in 80-130 us. After two probes in a row
 * found the first MiB written, the next clears skip it, twice as many
 * each time the streak grows, up to 64, and a probe then looks again.
 * Plain relaxed counters: a race costs a probe or a memset, both right. */
static unsigned dense_streak, dense_skip;

WARM_TEXT static bool zero_probe_skipped(void)
{
    unsigned skip = __atomic_load_n(&dense_skip, __ATOMIC_RELAXED);
    if (!skip)
        return false;
    __atomic_store_n(&dense_skip, skip - 1, __ATOMIC_RELAXED);
    return true;
}

WARM_TEXT static void zero_probe_found(bool dense)
{
    unsigned streak = dense ? __atomic_load_n(&dense_streak, __ATOMIC_RELAXED) + 1 : 0;
    __atomic_store_n(&dense_streak, streak, __ATOMIC_RELAXED);
    if (streak >= 2)
        __atomic_store_n(&dense_skip, 1u << (streak - 2 < 6 ? streak - 2 : 6), __ATOMIC_RELAXED);
}

static inline bool page_written(uint64_t entry) { return entry & (PM_PRESENT | PM_SWAPPED); }

/* Whether 7 in 8 of the n pages or more were written. */
WARM_TEXT static bool mostly_written(const uint64_t *e, size_t n)
{
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += page_written(e[i]);
    return w >= n - n / 8;
}

/* Clears the part of [lo, end) in the n pages from page number `first`. */
WARM_TEXT static void zero_pages(char *lo, char *end, uintptr_t first, size_t n)
{
    char *a = (char *)(first * OS_PAGE), *b = a + n * OS_PAGE;
    a = a > lo ? a : lo;
    b = b < end ? b : end;
    memset(a, 0, (size_t)(b - a));
}

WARM_TEXT void os_zero_written(void *p, size_t size)
{
    if (RUNNING_ON_VALGRIND || __atomic_load_n(&pagemap_refused, __ATOMIC_RELAXED) ||
        zero_probe_skipped()) {
        memset(p, 0, size);
        return;
    }
    /* Opened each time, not kept: "self" is whoever opens it (a descriptor
     * kept across fork() reads the parent's pages), and a program may close
     * every descriptor it did not open and reuse the number. calloc leaves
     * errno as it was when it succeeds. */
    int saved = errno;
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    char *lo = p, *end = lo + size;
    uintptr_t page = (uintptr_t)lo / OS_PAGE, last = ((uintptr_t)end - 1) / OS_PAGE;
    uint64_t e[PM_BATCH];
    bool first = true;
    bool refused = fd < 0;
    if (!refused && !__atomic_load_n(&pagemap_trusted, __ATOMIC_RELAXED)) {
        refused = !pagemap_believable(fd, &e[0]);
        __atomic_store_n(&pagemap_trusted, !refused, __ATOMIC_RELAXED);
    }
    while (!refused && page <= last) {
        size_t n = last - page + 1 < PM_BATCH ? last - page + 1 : PM_BATCH;
        ssize_t got = pagemap_read(fd, e, n * sizeof e[0], page);
        if (got != (ssize_t)(n * sizeof e[0])) {
            refused = !(got < 0 && errno == EINTR);   /* a signal: only this call goes plain */
            break;
        }
        if (first) {
            first = false;
            bool dense = mostly_written(e, n);
            zero_probe_found(dense);
            if (dense)          /* the rest likely too: cleared plain below */
                break;
        }
        for (size_t i = 0, j; i < n; i = j) {       /* a memset a run of written pages */
            for (j = i + 1; j < n && page_written(e[j]) == page_written(e[i]); j++)
                ;
            if (page_written(e[i]))
                zero_pages(lo, end, page + i, j - i);
        }
        page += n;
    }
    if (refused)
        __atomic_store_n(&pagemap_refused, true, __ATOMIC_RELAXED);
    if (page <= last)               /* not looked at: the plain way */
        zero_pages(lo, end, page, last - page + 1);
    if (fd >= 0)
        syscall(SYS_close, fd);
    errno = saved;
}

size_t os_resident(void *p, size_t size)
{
    return os_resident_per(p, size, size, NULL);
}
