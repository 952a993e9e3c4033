/*
 * background.c - the background thread (see the header): its start, its
 * sleeps, its stop, and fork.
 *
 * It runs heap_background_pass every period: a quarter of the idle
 * threshold (heap_idle_ms, 1 s by default), so an idle heap's empty pages
 * go back within 1.25 s of its last sweep. A quiet process should not pay
 * four wake-ups a second for ever, so once a pass finds every heap idle
 * past the threshold (so trimmed), none swept since the pass before, and
 * nothing to give back, the sleep doubles, up to DOZE_MAX_MS; the first
 * sweep or cached large block after that (background_poke, from any
 * thread) wakes it and the period starts over.
 */
#define _GNU_SOURCE
#include "background.h"
#include "heap.h"
#include "large_cache.h"
#include "span.h"
#include "os.h"
#include "../instrument/options.h"

#include <pthread.h>
#include <signal.h>

#define DOZE_MAX_MS 10000

enum { BG_NONE, BG_RUNNING };
static _Atomic int bg_state;
static _Atomic uint32_t bg_word;    /* the futex the thread sleeps on */
static bool bg_dozing;              /* atomic: sleeping longer than a period */
HIDDEN bool background_lost;        /* atomic: a fork child's thread to start */

static uint64_t bg_period_ms(void)
{
    uint64_t p = heap_idle_ms() / 4;
    return p < DOZE_MAX_MS ? p : DOZE_MAX_MS;
}

/* Whether the thread keeps running: the option is on. When it was
 * switched off, the thread lets go of its state; if it was switched on
 * again meanwhile, whoever did it saw the thread running and started
 * none, so the thread takes its state back. */
static bool bg_wanted(void)
{
    if (option(OPT_BACKGROUND))
        return true;
    atomic_store(&bg_state, BG_NONE);
    int expected = BG_NONE;
    return option(OPT_BACKGROUND) &&
           atomic_compare_exchange_strong(&bg_state, &expected, BG_RUNNING);
}

static void *bg_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "tally-purge");
    uint64_t sleep_ms = bg_period_ms(), seen_sweep = 0;
    uint32_t seen = atomic_load_explicit(&bg_word, memory_order_acquire);
    for (;;) {
        uint64_t period = bg_period_ms();
        __atomic_store_n(&bg_dozing, sleep_ms > period, __ATOMIC_RELAXED);
        os_wait_ms(&bg_word, seen, sleep_ms);
        /* Read before the option and the pass: a wake-up (background=0)
         * that lands during the pass ends the next wait at once. */
        seen = atomic_load_explicit(&bg_word, memory_order_acquire);
        __atomic_store_n(&bg_dozing, false, __ATOMIC_RELAXED);
        if (!bg_wanted())
            return NULL;
        bool gave;
        uint64_t now = os_now_ms();
        uint64_t newest = heap_background_pass(now, &gave);
        /* Settled: nothing given back, no sweep since the last pass, and
         * every heap idle long enough that this pass trimmed it. And an
         * empty large cache: an entry put while it dozed woke it (the
         * poke) before the entry expired, and kept it for a whole doze
         * (10 s) had the pass that found it too young counted as idle. */
        bool settled = !gave && !large_cache_holds() && !span_holds() && newest == seen_sweep &&
                       now >= newest + heap_idle_ms();
        if (!settled)
            sleep_ms = period;
        else if (sleep_ms < DOZE_MAX_MS)
            sleep_ms = 2 * sleep_ms < DOZE_MAX_MS ? 2 * sleep_ms : DOZE_MAX_MS;
        seen_sweep = newest;
    }
}

/* Detached, with every signal blocked (the mask is inherited): a signal
 * meant for the program is never run on this thread, and a program that
 * waits for its signals in one thread (sigwait) still gets them all. */
static bool bg_spawn(void)
{
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return false;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    bool ok = pthread_create(&t, &attr, bg_main, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    return ok;
}

void background_update(void)
{
    __atomic_store_n(&background_lost, false, __ATOMIC_RELAXED);
    if (!option(OPT_BACKGROUND)) {
        if (atomic_load(&bg_state) == BG_RUNNING)
            os_wake(&bg_word);          /* it sees the option off and leaves */
        return;
    }
    int expected = BG_NONE;
    if (atomic_compare_exchange_strong(&bg_state, &expected, BG_RUNNING) && !bg_spawn())
        atomic_store(&bg_state, BG_NONE);
}

void background_poke(void)
{
    if (unlikely(__atomic_load_n(&bg_dozing, __ATOMIC_RELAXED)) &&
        __atomic_exchange_n(&bg_dozing, false, __ATOMIC_RELAXED))
        os_wake(&bg_word);
}

/* The option, not the parent's state: a fork in the moment a thread
 * switched off and on again lets go of its state and takes it back
 * (bg_wanted) would leave the child without one. */
void background_fork_child(void)
{
    atomic_store(&bg_state, BG_NONE);
    __atomic_store_n(&bg_dozing, false, __ATOMIC_RELAXED);
    __atomic_store_n(&background_lost, option(OPT_BACKGROUND) != 0, __ATOMIC_RELAXED);
}
