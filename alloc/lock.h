/*
 * lock.h - the allocator's mutexes, and what fork does to them.
 *
 * tally's fork prepare handler takes every allocator lock and its parent
 * and child handlers release them. Handlers that another library
 * registered before tally's first malloc (a constructor that runs before
 * it, a preinit function) run inside that window, on the forking thread:
 * glibc runs prepare handlers in reverse order of registration and the
 * others in order. glibc's malloc lets them allocate, so tally must too:
 * while the forking thread holds every lock, taking one is a no-op on that
 * thread, and no other thread can be inside. The fork handlers themselves
 * use the pthread calls directly.
 */
#ifndef TALLY_LOCK_H
#define TALLY_LOCK_H

#include "internal.h"

#include <pthread.h>

/* Set by the prepare handler once it holds every lock; cleared by the
 * parent and child handlers before they let go. */
extern HIDDEN __thread bool lock_held_for_fork TLS_IE;

static inline void lock_take(pthread_mutex_t *m)
{
    if (likely(!lock_held_for_fork))
        pthread_mutex_lock(m);
}

/* True when the caller holds m. */
static inline bool lock_try(pthread_mutex_t *m)
{
    return lock_held_for_fork || pthread_mutex_trylock(m) == 0;
}

static inline void lock_give(pthread_mutex_t *m)
{
    if (likely(!lock_held_for_fork))
        pthread_mutex_unlock(m);
}

#endif
