/*
 * report.c - report destination, symbolisation, and the reports printed
 * when the process exits (statistics, timing, leaks), each only when its
 * option asks for it.
 */
#define _GNU_SOURCE
#include "report.h"
#include "options.h"
#include "debug.h"
#include "timing.h"
#include "../include/tally.h"

#include <dlfcn.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

/* A private copy of stderr, taken when a report is first asked for: many
 * programs close stderr on their way out (gnulib's close_stdout does),
 * before the exit reports are printed. */
static int saved_stderr = -1;

COLD_TEXT void report_prepare(void)
{
    if (__atomic_load_n(&saved_stderr, __ATOMIC_RELAXED) >= 0)
        return;
    int fd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 10);
    int expected = -1;
    if (fd >= 0 && !__atomic_compare_exchange_n(&saved_stderr, &expected, fd, false,
                                                __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
        close(fd);
}

COLD_TEXT int report_open(void)
{
    char path[OPTION_STRING_MAX];
    memcpy(path, options_report, sizeof path);
    path[sizeof path - 1] = '\0';
    if (strcmp(path, "stderr") == 0) {
        int fd = __atomic_load_n(&saved_stderr, __ATOMIC_RELAXED);
        return fd >= 0 ? fd : STDERR_FILENO;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    return fd >= 0 ? fd : STDERR_FILENO;
}

COLD_TEXT void report_close(int fd)
{
    if (fd != STDERR_FILENO && fd != __atomic_load_n(&saved_stderr, __ATOMIC_RELAXED))
        close(fd);
}

/* "symbol+0xoff (object+0xoff)": the object offset is what addr2line -e
 * takes when the symbol is not exported. */
COLD_TEXT void report_symbol(struct diag_buf *b, const void *addr)
{
    Dl_info info;
    if (!addr || !dladdr(addr, &info)) {
        diag_hex(b, (uintptr_t)addr);
        return;
    }
    if (info.dli_sname) {
        diag_str(b, info.dli_sname);
        diag_str(b, "+");
        diag_hex(b, (uintptr_t)addr - (uintptr_t)info.dli_saddr);
    } else {
        diag_hex(b, (uintptr_t)addr);
    }
    if (info.dli_fname) {
        const char *base = strrchr(info.dli_fname, '/');
        diag_str(b, " (");
        diag_str(b, base ? base + 1 : info.dli_fname);
        diag_str(b, "+");
        diag_hex(b, (uintptr_t)addr - (uintptr_t)info.dli_fbase);
        diag_str(b, ")");
    }
}

COLD_TEXT void report_maybe_flush(struct diag_buf *b, int fd)
{
    if (b->len > sizeof b->text - 160)
        diag_flush(b, fd);
}

/* Runs after main returns (and after exit()'s atexit handlers). */
__attribute__((destructor)) static void report_at_exit(void)
{
    if (option(OPT_STATS))
        tally_stats_print(-1, TALLY_STATS_TEXT);
    if (option(OPT_TIMING))
        timing_report(-1);
    if (debug_was_used() && option(OPT_LEAKS) && debug_live_blocks())
        tally_report_leaks();
}
