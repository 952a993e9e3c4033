/*
 * w_realloc.c - the "realloc growth" seed (seeds/002), after FreeBSD's
 * ports/benchmarks/forkbomb: one block is grown with realloc to 1, 2, ...,
 * -l MiB, then freed; that is repeated -i times.
 *
 * usage: w_realloc [-l limit MiB=64] [-i restarts=256] [-M | -m]
 *   -M  write one byte into every 4 KiB page the block gained (old size up
 *       to new size) after each realloc, and check that earlier bytes
 *       survived the move;
 *   -m  never touch the memory (default), so an allocator that grows in
 *       place or with mremap does almost nothing.
 * Prints user, sys and wall time and minor faults, like time(1) did.
 */
#include "bench_util.h"

/* The byte written into page `pg`: distinct per page, never zero. */
static inline char page_mark(size_t pg)
{
    return (char)(pg % 251 + 1);
}

static void check_page(const char *p, size_t pg, size_t mib)
{
    if (p[pg * BU_PAGE] != page_mark(pg))
        bu_fail("page %zu lost its byte after realloc to %zu MiB", pg, mib);
}

/* One restart: grow from nothing to `limit` MiB, then free. */
static void grow_once(long limit, int touch)
{
    char *p = NULL;
    size_t old = 0;
    for (long mib = 1; mib <= limit; mib++) {
        size_t size = (size_t)mib << 20;
        p = bu_check(realloc(p, size), size);
        if (touch) {
            if (old) {
                check_page(p, 0, (size_t)mib);
                check_page(p, old / BU_PAGE - 1, (size_t)mib);
            }
            for (size_t off = old; off < size; off += BU_PAGE)
                p[off] = page_mark(off / BU_PAGE);
        }
        old = size;
    }
    free(p);
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
    long limit = 64, restarts = 256;
    int touch = 0, opt;
    while ((opt = getopt(argc, argv, "l:i:Mm")) != -1) {
        switch (opt) {
        case 'l': limit = bu_arg_long(optarg, "-l"); break;
        case 'i': restarts = bu_arg_long(optarg, "-i"); break;
        case 'M': touch = 1; break;
        case 'm': touch = 0; break;
        default:
            fprintf(stderr, "usage: %s [-l MiB] [-i restarts] [-M|-m]\n", argv[0]);
            return 64;
        }
    }
    if (limit < 1 || limit > 4096)
        bu_fail("-l must be 1..4096 MiB");

    struct rusage r0, r1;
    getrusage(RUSAGE_SELF, &r0);
    double t0 = bu_now_s();
    for (long i = 0; i < restarts; i++)
        grow_once(limit, touch);
    double wall = bu_now_s() - t0;
    getrusage(RUSAGE_SELF, &r1);

    double user = tv_s(r1.ru_utime) - tv_s(r0.ru_utime);
    double sys = tv_s(r1.ru_stime) - tv_s(r0.ru_stime);
    long faults = r1.ru_minflt - r0.ru_minflt;
    printf("realloc 1..%ld MiB x %ld %s: %.3fs user %.3fs system %.3f total, "
           "%ld minor faults\n", limit, restarts, touch ? "-M" : "-m",
           user, sys, wall, faults);
    bu_metric("total_s", wall);
    bu_metric("user_s", user);
    bu_metric("sys_s", sys);
    bu_metric("minor_faults", (double)faults);
    return 0;
}
