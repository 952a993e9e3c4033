/*
 * diag.h - the error sink and a tiny formatter that never allocates.
 *
 * Every report tally prints goes through a stack buffer and write(2), so it
 * is safe inside malloc, in a signal-shaken heap, and before stdio exists.
 */
#ifndef TALLY_DIAG_H
#define TALLY_DIAG_H

#include "internal.h"

struct diag_buf { char text[512]; size_t len; };

HIDDEN void diag_str(struct diag_buf *b, const char *s);
HIDDEN void diag_hex(struct diag_buf *b, uintptr_t v);
HIDDEN void diag_dec(struct diag_buf *b, uint64_t v);
HIDDEN void diag_flush(struct diag_buf *b, int fd);

/* Appends "tally: FUNC(): WHAT: pointer 0x...", every report's first words. */
HIDDEN void diag_headline(struct diag_buf *b, const char *func, const char *what,
                          const void *p);
/* "tally: FUNC(): WHAT: pointer 0x... (prog, pid N)", then abort(). */
HIDDEN __attribute__((noreturn, cold)) void diag_fail(const char *func, const char *what,
                                                     const void *p);
/* One "tally: warning: ..." line on stderr. */
HIDDEN void diag_warn(const char *what, const char *detail);

#endif
