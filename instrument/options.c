/*
 * options.c - parse and hold tally's options.
 *
 * Numbers accept a k/m/g suffix (powers of 1024) so thresholds read
 * naturally: TALLY_OPTIONS=mmap_threshold=256k,purge_delay=50.
 * An unknown key or a bad value prints one warning and is ignored: a typo
 * in an environment variable must never take a production process down.
 */
#include "options.h"
#include "hooks.h"
#include "../alloc/os.h"
#include "../alloc/diag.h"

#include <stdatomic.h>
#include <sys/auxv.h>
#include <string.h>

extern char **environ;

#define NUM(name, def, min, max, mode, doc) { name, def, min, max, false, mode, doc }

/* Defaults that are not 0, named once for the table and the live values. */
#define DEF_MMAP_THRESHOLD (512 * 1024)
#define DEF_PURGE_DELAY    100
#define DEF_LARGE_CACHE    (256 << 20)
#define DEF_PURGE_BATCH    1
#define DEF_LEAKS          1
#define DEF_QUARANTINE     (4 << 20)
#define DEF_ABORT          1

HIDDEN const struct option_def options_table[OPT_COUNT] = {
    [OPT_MMAP_THRESHOLD] = NUM("mmap_threshold", DEF_MMAP_THRESHOLD, 0, (uint64_t)1 << 40, true,
                               "bytes; larger requests get their own mapping "
                               "(effective range 8 KiB .. 512 KiB)"),
    [OPT_PURGE_DELAY] = NUM("purge_delay", DEF_PURGE_DELAY, 0, 3600 * 1000, false,
                            "ms an empty small page is kept before its memory goes back to "
                            "the OS (medium pages: a quarter of it)"),
    [OPT_LARGE_CACHE] = NUM("large_cache", DEF_LARGE_CACHE, 0, (uint64_t)1 << 40, false,
                            "bytes of freed large blocks kept mapped for reuse (up to 1 s; past 4 MiB, purge_delay)"),
    [OPT_PURGE_BATCH] = NUM("purge_batch", DEF_PURGE_BATCH, 0, 1, false,
                            "1: a sweep hands its purges to the kernel in one process_madvise "
                            "call where the kernel takes it (one TLB flush); 0: one madvise each, "
                            "for seccomp filters that forbid process_madvise"),
    [OPT_DEBUG] = NUM("debug", 0, 0, 1, true,
                      "canaries, junk/poison, quarantine, double/invalid free reports"),
    [OPT_TIMING] = NUM("timing", 0, 0, 1, true,
                       "per-call latency histograms, page faults, syscall time"),
    [OPT_STATS] = NUM("stats", 0, 0, 1, true, "print the statistics at exit"),
    [OPT_LEAKS] = NUM("leaks", DEF_LEAKS, 0, 1, false,
                      "with debug=1, report live debug blocks at exit"),
    [OPT_QUARANTINE] = NUM("quarantine", DEF_QUARANTINE, 0, (uint64_t)1 << 40, false,
                           "bytes of freed debug blocks held back before reuse"),
    [OPT_BACKTRACE] = NUM("backtrace", 0, 0, 16, false,
                          "frames recorded per debug block (0: the caller only)"),
    [OPT_ABORT] = NUM("abort", DEF_ABORT, 0, 1, false,
                      "abort on a detected error (0: report and continue)"),
    [OPT_REPORT] = { "report", 0, 0, 0, true, false,
                     "where reports go: stderr, or a file path (appended)" },
    [OPT_SECURE] = NUM("secure", 0, 0, 1, true,
                       "guard pages after segments and large blocks, random slot order, "
                       "every free validated (applies to memory mapped after it is set)"),
    [OPT_BACKGROUND] = NUM("background", 0, 0, 1, false,
                           "1: a thread of tally's own gives back what threads that stopped "
                           "calling malloc freed (after 1 s idle: 10 purge delays), what exited "
                           "threads left and the large cache, in a process nobody allocates in"),
    [OPT_TEST_FAIL_MMAP] = NUM("test_fail_mmap", 0, 0, 1000000, false,
                               "tests only: the N-th next mmap/mremap fails (0: off)"),
};

HIDDEN uint64_t options_value[OPT_COUNT] = {
    [OPT_MMAP_THRESHOLD] = DEF_MMAP_THRESHOLD,
    [OPT_PURGE_DELAY] = DEF_PURGE_DELAY,
    [OPT_LARGE_CACHE] = DEF_LARGE_CACHE,
    [OPT_PURGE_BATCH] = DEF_PURGE_BATCH,
    [OPT_LEAKS] = DEF_LEAKS,
    [OPT_QUARANTINE] = DEF_QUARANTINE,
    [OPT_ABORT] = DEF_ABORT,
};

HIDDEN char options_report[OPTION_STRING_MAX] = "stderr";

static _Atomic int env_loaded;

COLD_TEXT int options_find(const char *name, size_t len)
{
    for (int i = 0; i < OPT_COUNT; i++) {
        if (strlen(options_table[i].name) == len && memcmp(options_table[i].name, name, len) == 0)
            return i;
    }
    return -1;
}

/* Parses "123", "64k", "4m", "1g". Returns false on anything else. */
static COLD_TEXT bool options_parse_number(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;
    size_t i = 0;
    if (len == 0)
        return false;
    for (; i < len && s[i] >= '0' && s[i] <= '9'; i++) {
        if (v > (UINT64_MAX - 9) / 10)
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (i == 0)
        return false;
    if (i + 1 == len) {
        unsigned shift = 0;
        switch (s[i] | 0x20) {
        case 'k': shift = 10; break;
        case 'm': shift = 20; break;
        case 'g': shift = 30; break;
        default: return false;
        }
        if (v > (UINT64_MAX >> shift))
            return false;
        v <<= shift;
    } else if (i != len) {
        return false;
    }
    *out = v;
    return true;
}

COLD_TEXT int options_set(const char *name, size_t name_len, const char *value, size_t value_len)
{
    int id = options_find(name, name_len);
    if (id < 0)
        return -1;
    if (options_table[id].is_string) {
        if (value_len == 0 || value_len >= OPTION_STRING_MAX)
            return -2;
        /* Readers take the string at report time; a torn read of a path
         * being replaced is harmless next to locking inside malloc. */
        memcpy(options_report, value, value_len);
        options_report[value_len] = '\0';
        return 0;
    }
    uint64_t v;
    if (!options_parse_number(value, value_len, &v))
        return -2;
    return options_set_value((enum option_id)id, v);
}

COLD_TEXT int options_set_value(enum option_id id, uint64_t v)
{
    if (v < options_table[id].min || v > options_table[id].max)
        return -2;
    __atomic_store_n(&options_value[id], v, __ATOMIC_RELAXED);
    if (options_table[id].switches_mode)
        hooks_update();
    if (id == OPT_TEST_FAIL_MMAP)
        os_fail_after((long)v);
    return 0;
}

static COLD_TEXT void options_warn(const char *what, const char *s, size_t len)
{
    char item[128];
    size_t n = len < sizeof item - 1 ? len : sizeof item - 1;
    memcpy(item, s, n);
    item[n] = '\0';
    diag_warn(what, item);
}

static COLD_TEXT void options_parse_list(const char *s)
{
    while (*s) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        const char *eq = memchr(s, '=', len);
        if (len) {
            size_t klen = eq ? (size_t)(eq - s) : len;
            const char *val = eq ? eq + 1 : "1";
            size_t vlen = eq ? len - klen - 1 : 1;
            /* A key alone switches a number on; `report` alone has no
             * path ("1" would be a file in the working directory), so it
             * takes the empty value, which is refused. */
            int id = options_find(s, klen);
            if (!eq && id >= 0 && options_table[id].is_string)
                vlen = 0;
            int rc = options_set(s, klen, val, vlen);
            if (rc == -1)
                options_warn("TALLY_OPTIONS: unknown option ignored: ", s, len);
            else if (rc == -2)
                options_warn("TALLY_OPTIONS: bad value ignored: ", s, len);
        }
        s += len + (end ? 1 : 0);
    }
}

void options_load_env(void)
{
    /* A set-user-ID or set-group-ID program (AT_SECURE) ignores the
     * environment, as glibc does its MALLOC_ variables: an unprivileged
     * caller could otherwise have it create and append to any file
     * (`report=`), or switch its checks off (`abort=0`). The API still
     * sets options from within the program. */
    if (!environ || getauxval(AT_SECURE) || atomic_exchange(&env_loaded, 1))
        return;
    static const char key[] = "TALLY_OPTIONS=";
    for (char **e = environ; *e; e++) {
        if (strncmp(*e, key, sizeof key - 1) == 0) {
            options_parse_list(*e + sizeof key - 1);
            return;
        }
    }
}
