/*
 * ubsan_init.c - linked into build/ubsan/libtally.so only (test-ubsan):
 * makes UBSan's runtime initialise itself at load time, while tally is idle.
 *
 * Why: the standalone UBSan runtime (gcc's libubsan) initialises lazily, in
 * the first check that fails, and that initialisation calls malloc, free
 * and realloc (dlsym("swift_demangle") -> dlerror -> asprintf, flag and
 * suppression set-up). If the first report came from inside tally - with a
 * heap half-updated or a tally lock held - that malloc would re-enter tally
 * there and could deadlock or corrupt state before anything was printed.
 * Once initialised, printing a report (and its stack trace) calls no malloc.
 *
 * How: one deliberate, recoverable signed overflow, compiled with
 * -fsanitize-recover so its handler returns. The handler initialises the
 * runtime, then finds the report suppressed by tests/sanitize/ubsan.supp
 * (signed-integer-overflow:ubsan_init.c) and prints nothing. tally's own
 * code is compiled with -fno-sanitize-recover=undefined, and UBSan never
 * applies suppressions to unrecoverable checks, so that file cannot hide a
 * report from tally.
 */
#include <limits.h>

__attribute__((constructor(100))) static void ubsan_init_early(void)
{
    volatile int big = INT_MAX;
    volatile int sum = big + 1;       /* suppressed; initialises the runtime */
    (void)sum;
}
