/*
 * valgrind.c - memcheck client requests (header-only <valgrind/valgrind.h>
 * and <valgrind/memcheck.h>). Built without them when the headers are
 * absent: then vg_running() is always false.
 */
#include "valgrind.h"

#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#include <valgrind/valgrind.h>

bool vg_running(void)
{
    static int state = -1;       /* -1 unknown, 0 no, 1 yes */
    int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
    if (s < 0) {
        /* Only memcheck answers GET_VBITS (1 = success): under callgrind or
         * any other tool the fast paths stay on and counts stay true. */
        unsigned char probe = 0, vbits = 0;
        s = RUNNING_ON_VALGRIND && VALGRIND_GET_VBITS(&probe, &vbits, 1) == 1;
        __atomic_store_n(&state, s, __ATOMIC_RELAXED);
    }
    return s;
}

COLD_TEXT void vg_alloc(void *p, size_t size, bool zeroed)
{
    if (p)
        VALGRIND_MALLOCLIKE_BLOCK(p, size, 0, zeroed);
}

COLD_TEXT void vg_free(void *p)
{
    if (!p)
        return;
    VALGRIND_FREELIKE_BLOCK(p, 0);
    /* The block's first two words become tally's: the free-list link and,
     * in medium blocks, the purge mark, read later by other paths (drains,
     * sweeps). Keep just those 16 bytes addressable and defined (every
     * block has them); the rest stays off-limits to the program. */
    VALGRIND_MAKE_MEM_DEFINED(p, 2 * sizeof(uintptr_t));
}

COLD_TEXT void vg_quiet_begin(void) { VALGRIND_DISABLE_ERROR_REPORTING; }
COLD_TEXT void vg_quiet_end(void) { VALGRIND_ENABLE_ERROR_REPORTING; }

#else

bool vg_running(void) { return false; }
void vg_alloc(void *p, size_t size, bool zeroed) { (void)p; (void)size; (void)zeroed; }
void vg_free(void *p) { (void)p; }
void vg_quiet_begin(void) {}
void vg_quiet_end(void) {}

#endif
