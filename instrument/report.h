/*
 * report.h - where instrumentation reports go, and how addresses become
 * names. Everything is formatted into stack buffers (alloc/diag.h) and
 * written with write(2): reports are printed from inside malloc.
 */
#ifndef TALLY_REPORT_H
#define TALLY_REPORT_H

#include "../alloc/diag.h"

/* Keeps a copy of stderr for reports printed at exit. */
HIDDEN void report_prepare(void);
/* Opens the `report` destination (stderr or the file, appending). */
HIDDEN int report_open(void);
HIDDEN void report_close(int fd);
/* Appends "name+0xoff (object)" for a code address, or the bare address. */
HIDDEN void report_symbol(struct diag_buf *b, const void *addr);
/* Writes b to fd when it is nearly full, so long reports stream out. */
HIDDEN void report_maybe_flush(struct diag_buf *b, int fd);

#endif
