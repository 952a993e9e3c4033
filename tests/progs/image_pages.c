/*
 * image_pages.c - which of libtally.so's segments a run leaves resident
 * (alloc/image.ld): run with tally preloaded, it allocates in every way a
 * plain program does (small, medium, span-sized and mmap-sized blocks,
 * realloc by mremap, calloc, aligned, other threads' frees, fork,
 * malloc_trim), then counts the present pages of each of the library's
 * loaded segments through /proc/self/pagemap.
 *
 * usage: prog_image_pages [small|touch]
 *   small: blocks of up to 8 KiB only (no span or mmap-sized block)
 *   touch: also print the statistics (tally_stats_print, cold code)
 *
 * Prints one line: `cold=N warm=N eh=N text=N large=N`: the present pages
 * of the segment of the cold code, of the other code segments but the one
 * of malloc (the warm code: span and large blocks), of the unwind
 * tables', and of malloc's; then, read after the count (the statistics
 * are cold code), the span and large blocks live or cached, which
 * something else in the process may have made (a sanitizer's runtime);
 * or `error ...`.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tally.h"

#define PAGE 4096u

static void *kept[64];

static void *frees_the_mains(void *arg)
{
    (void)arg;
    for (int i = 0; i < 64; i++)
        free(kept[i]);
    void *mine[256];
    for (int i = 0; i < 256; i++)
        mine[i] = malloc(16u + (unsigned)i * 24u);
    for (int i = 0; i < 256; i++)
        free(mine[i]);
    return NULL;
}

static void allocate_every_way(bool small)
{
    static const size_t sizes[] = { 1, 16, 100, 256, 1000, 4000, 8000, 9000, 50000,
                                    200000, 600000, 3u << 20 };
    size_t kinds = small ? 7 : sizeof sizes / sizeof sizes[0];
    for (int round = 0; round < 50; round++) {
        void *p[sizeof sizes / sizeof sizes[0]];
        for (size_t i = 0; i < kinds; i++) {
            p[i] = malloc(sizes[i]);
            memset(p[i], 1, sizes[i]);
        }
        for (size_t i = 0; i < kinds; i++)
            free(p[i]);
    }
    char *g = NULL;
    size_t step = small ? 512 : 1u << 20, steps = small ? 16 : 64;
    for (size_t n = 1; n <= steps; n++) {     /* to 64 MiB: mremap */
        g = realloc(g, n * step);
        g[n * step - 1] = 1;
    }
    free(g);
    free(calloc(100, 40));
    void *a = NULL;
    if (posix_memalign(&a, small ? 256 : 4096, small ? 3000 : 5000) == 0)
        free(a);
    free(aligned_alloc(64, 640));
    void *u = malloc(300);
    if (malloc_usable_size(u) < 300)
        abort();
    free(u);
    free(NULL);

    for (int i = 0; i < 64; i++)
        kept[i] = malloc(48u + (unsigned)i * 100u);
    pthread_t t;
    if (pthread_create(&t, NULL, frees_the_mains, NULL) != 0)
        abort();
    pthread_join(t, NULL);

    pid_t pid = fork();
    if (pid == 0) {
        free(malloc(100));
        _exit(0);
    }
    waitpid(pid, NULL, 0);
    malloc_trim(0);
}

/* Present pages of [start, end), from the pagemap's bit 63. */
static long present(int pagemap, uintptr_t start, uintptr_t end)
{
    long n = 0;
    for (uintptr_t a = start & ~(uintptr_t)(PAGE - 1); a < end; a += PAGE) {
        uint64_t e;
        if (pread(pagemap, &e, sizeof e, (off_t)(a / PAGE * sizeof e)) != sizeof e)
            return -1;
        n += (long)(e >> 63);
    }
    return n;
}

struct look {
    uintptr_t cold_fn;                  /* an address in the cold code */
    uintptr_t in_text;                  /* an address in malloc's code */
    long cold, warm, eh, text;
    int pagemap, found;
};

static int segment_pages(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct look *l = arg;
    uintptr_t eh = 0;
    bool ours = false;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t s = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_GNU_EH_FRAME)
            eh = s;
        if (ph->p_type == PT_LOAD && l->cold_fn >= s && l->cold_fn < s + ph->p_memsz)
            ours = true;
    }
    if (!ours)
        return 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD)
            continue;
        uintptr_t s = info->dlpi_addr + ph->p_vaddr, e = s + ph->p_memsz;
        long n = present(l->pagemap, s, e);
        if (l->cold_fn >= s && l->cold_fn < e)
            l->cold = n;
        else if (l->in_text >= s && l->in_text < e)
            l->text = n;
        else if (ph->p_flags & PF_X)
            l->warm += n;
        if (eh >= s && eh < e)
            l->eh = n;
    }
    l->found = 1;
    return 1;
}

int main(int argc, char **argv)
{
    const char *how = argc > 1 ? argv[1] : "";
    allocate_every_way(strcmp(how, "small") == 0);
    void *stats_print = dlsym(RTLD_DEFAULT, "tally_stats_print");
    if (!stats_print) {
        printf("error: tally is not loaded\n");
        return 1;
    }
    if (strcmp(how, "touch") == 0) {
        int null = open("/dev/null", O_WRONLY);
        ((int (*)(int, int))stats_print)(null, 0);
        close(null);
    }
    struct look l = { .cold_fn = (uintptr_t)stats_print,
                      .in_text = (uintptr_t)dlsym(RTLD_DEFAULT, "malloc"),
                      .cold = -1, .warm = 0, .eh = -1, .text = -1 };
    l.pagemap = open("/proc/self/pagemap", O_RDONLY);
    if (l.pagemap < 0) {
        printf("error: no pagemap\n");
        return 1;
    }
    dl_iterate_phdr(segment_pages, &l);
    if (!l.found) {
        printf("error: libtally.so's segments not found\n");
        return 1;
    }
    struct tally_stats st = { .size = sizeof st };
    int (*stats_get)(struct tally_stats *) =
        (int (*)(struct tally_stats *))dlsym(RTLD_DEFAULT, "tally_stats_get");
    if (!stats_get || stats_get(&st) != 0) {
        printf("error: no statistics\n");
        return 1;
    }
    printf("cold=%ld warm=%ld eh=%ld text=%ld large=%llu\n", l.cold, l.warm, l.eh, l.text,
           (unsigned long long)(st.large_count + (st.cached_bytes != 0)));
    return 0;
}
