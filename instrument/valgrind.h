/*
 * valgrind.h - running under valgrind's memcheck: tally describes its
 * blocks with client requests so memcheck tracks them as heap blocks
 * (leaks, overflows past the usable size, use after free, uninitialised
 * reads), and silences memcheck while tally itself walks freed memory.
 *
 * Detected once at start-up (memcheck only: other tools such as callgrind
 * see the normal fast paths). Under memcheck every call takes the hooks
 * path; outside it nothing here runs. Run as
 *   LD_PRELOAD=libtally.so valgrind --soname-synonyms=somalloc=nouserintercept prog
 * so that memcheck leaves tally's malloc in place.
 */
#ifndef TALLY_VALGRIND_H
#define TALLY_VALGRIND_H

#include "../alloc/internal.h"

HIDDEN bool vg_running(void);
/* A block handed to the program, `size` bytes usable. */
HIDDEN void vg_alloc(void *p, size_t size, bool zeroed);
HIDDEN void vg_free(void *p);
/* Brackets tally's own work on free lists and freed blocks. */
HIDDEN void vg_quiet_begin(void);
HIDDEN void vg_quiet_end(void);

#endif
