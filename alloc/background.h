/*
 * background.h - the background thread (option background=1): gives back
 * memory in a process where nobody calls malloc any more.
 *
 * Every sweep rides a call into tally: malloc's tick, a slow free, a slow
 * path. A server that frees a peak and then waits for requests (redis
 * after FLUSHALL, a worker pool between jobs) makes no such call, and what
 * it freed in its last purge delay stays resident for as long as it waits.
 * The background thread does, now and then, what those calls would have:
 * heap_background_pass (heap_life.c). Off by default, as jemalloc's
 * background_thread is: a thread of the allocator's own is visible to the
 * program (unshare(CLONE_NEWUSER) refuses a multi-threaded process; so do
 * programs that count their threads), so the user asks for it.
 */
#ifndef TALLY_BACKGROUND_H
#define TALLY_BACKGROUND_H

#include "internal.h"
#include "lock.h"

/* Starts the thread if the option is on and none runs; wakes it to leave
 * if the option is off. Called at load (init.c) and from tally_option_set,
 * where the program is at a plain call; from inside malloc only by
 * background_resume, and there only with every tally lock released
 * (pthread_create allocates the new thread's TLS through malloc): at the
 * end of an allocation's slow path (malloc.c, alloc_entry) and of a sweep
 * tick. */
HIDDEN void background_update(void);
/* From a sweep: a thread that dozes (long sleeps, nothing to do) wakes up,
 * since there is work again. One relaxed load when it is not dozing. */
HIDDEN void background_poke(void);
/* After fork the child has no background thread. Its first allocation
 * slow path or sweep tick starts one (background_resume, called with no
 * tally lock held), rather than the fork handler: a child that execs at
 * once never needs one. */
HIDDEN void background_fork_child(void);
extern HIDDEN bool background_lost;
static inline void background_resume(void)
{
    /* Not inside fork's window, where this thread holds every lock and
     * another library's fork handler allocates (lock.h). */
    if (unlikely(__atomic_load_n(&background_lost, __ATOMIC_RELAXED)) && !lock_held_for_fork)
        background_update();
}

#endif
