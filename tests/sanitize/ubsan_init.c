/*
 * ubsan_init.c - linked into build/ubsan/libtally.so only (test-ubsan):
 * makes UBSan's runtime initialise itself at load time, while tally is idle.
 *
 * Why: the standalone UBSan runtime (gcc's libubsan) initialises lazily, in
 * the first check that fails, and that initialisation calls malloc, free
 * and realloc (Symbolizer::LateInitialize -> dlsym("swift_demangle") ->
 * dlerror -> asprintf). If the first report came from inside tally - with a
 * heap half-updated or a tally lock held - that malloc would re-enter tally
 * there and could deadlock or corrupt state before anything was printed.
 * Once initialised, printing a report (and its stack trace) calls no malloc.
 *
 * When: constructor priority 101, the highest a program may use, like
 * tally's own init_at_load; test-ubsan lists this file first in LIB_SRC, and
 * constructors of one priority run in link order, so this one runs first.
 * (A malloc made before any constructor, by ld.so or libc, is still served
 * before it.)
 *
 * How: one call of the runtime's recoverable signed-overflow handler, with
 * check data built here (this file is compiled like the rest of the
 * library, with -fno-sanitize-recover, so a real overflow would be fatal).
 * The handler initialises the runtime, then finds the report suppressed by
 * tests/sanitize/ubsan.supp (signed-integer-overflow:ubsan_init.c) and
 * prints nothing; without that file it prints one harmless line. UBSan
 * never applies suppressions to unrecoverable checks, which is how every
 * tally source is built, so the entry cannot hide a report from tally.
 */
#include <limits.h>
#include <stdint.h>

/* The layouts of compiler-rt's SourceLocation, TypeDescriptor and
 * OverflowData (ubsan_value.h, ubsan_handlers.h), stable for years. */
struct ubsan_location { const char *file; uint32_t line, column; };
struct ubsan_type { uint16_t kind, info; char name[6]; };
struct ubsan_overflow { struct ubsan_location loc; const struct ubsan_type *type; };

void __ubsan_handle_add_overflow(void *data, void *lhs, void *rhs);

/* kind 0: integer; info: log2(32 bits) << 1 | signed. */
static const struct ubsan_type int_type = { 0, 5 << 1 | 1, "'int'" };
static struct ubsan_overflow overflow = { { __FILE__, __LINE__, 1 }, &int_type };

__attribute__((constructor(101))) static void ubsan_init_early(void)
{
    __ubsan_handle_add_overflow(&overflow, (void *)(uintptr_t)INT_MAX, (void *)(uintptr_t)1);
}
