/*
 * span.c - span segments: runs of 16 KiB units for large blocks up to
 * half a segment (see the header), and the gates that say whether the
 * program's blocks of each run length are worth serving from them.
 *
 * Segments belong to SPAN_ARENAS arenas, each with its lock, lists and
 * peak rule; a thread takes runs from its heap's arena, and a run goes
 * back to its segment's. With one lock over all of it, two threads
 * replacing 32-256 KiB buffers (bufchurn) took 1.3x as long as one, and
 * eight threads on 2 CPUs 0.34 s against glibc's 0.27 (with arenas 0.25,
 * at 12% more peak RSS: each arena keeps its own slack). In an arena,
 * every segment with a free unit is on the open list, the one freed into
 * last at its head (expiry and the peak rule take the oldest first), and
 * filed under fits[] by its longest free run (a request weighs a few that
 * fit). A segment's state, in unit 0, is its unit maps (unitmap.h: free,
 * dirty = written since it was mapped or last purged, run starts), the
 * pages each unit had resident when last measured (the gate's measure),
 * and a header slot for each live run.
 *
 * Units are purged with the arena's lock held, and the purges flushed
 * before it is given back (os.h's batches): once it is, another thread
 * may take and write them. The gates are the process's: arenas note into
 * them under their own locks.
 */
#define _GNU_SOURCE             /* the adaptive mutex */
#include "span.h"
#include "unitmap.h"
#include "segment.h"
#include "os.h"
#include "lock.h"
#include "large_cache.h"
#include "background.h"
#include "init.h"

#include <pthread.h>
#include <string.h>

#define SPAN_MAGIC 0x7a115ba115e6ULL
#define FREE_MAX   (SPAN_UNITS - 1)     /* unit 0 is the header's */

/* The peak rule's slack: cached and live units may pass the live peak by
 * this fraction of it. A round's blocks reuse the units the last round
 * freed whatever their sizes, but the fragments left between them need
 * room; held to the peak exactly, bufcycle's were purged each round and
 * faulted in again (0.30 s against 0.19, for 62.5 MiB of peak RSS against
 * 66.6 with an eighth). With the floor below, a sixteenth does as well as
 * an eighth did: 0.198 s against 0.216 and 63.4 MiB against 66.6 (glibc
 * 59.2; docs/benchmarks.md). */
#define SPAN_PEAK_SLACK 16
/* And at least a segment's worth of units: with a few live blocks the
 * fraction is a unit or two, and a block of another size found no resident
 * run long enough, took fresh units and purged others for them. Eight
 * live blocks of 256 KiB-1 MiB, touched and replaced at random (w_large
 * -b 1024): 14k faults and 0.17 s a run against tcmalloc's 3.4k and 0.04
 * s; with the floor 2.5k and 0.04 s, at 10.7 MiB of peak RSS against 9.8
 * (tcmalloc 16.2). Half a segment, with a thirty-second, took bufcycle
 * from 64.9 to 62.8 MiB at the same time, but two threads replacing 64
 * live blocks of 100-300 KiB each purged and faulted their units again
 * and again: 0.52 -> 0.73 s (glibc 0.50), and eight on 2 CPUs with 64-256
 * KiB blocks 1.11 -> 1.96 s. */
#define SPAN_SLACK_MIN  SPAN_UNITS
/* Segments with no live run kept mapped until they expire: one unmapped
 * as soon as its last run went, and mapped again by the next request,
 * cost a program whose live set swings (mstress) 1,800 mmap and munmap
 * calls, each under the lock. */
#define SPAN_EMPTY_KEEP 8

struct span_segment {
    /* First what a request's walk of fits[] reads of each segment it
     * weighs: the link and the free units. */
    uint64_t magic;
    struct span_segment *fnext, *fprev; /* fits[longest], while it has a free unit */
    struct unitmap free;    /* units in no live run */
    unsigned nfree;         /* units in `free` */
    unsigned longest;       /* its longest free run, in units */
    struct unitmap dirty;   /* units maybe resident: written since mapped or purged */
    struct unitmap starts;  /* units a live run starts at */
    uint64_t freed_at;      /* ms of the last free into it: the list's order */
    struct span_segment *prev, *next;   /* the open list, while it has a free unit */
    struct span_arena *arena;           /* whose lock and lists it is on */
    struct unitmap slots;   /* header slots in use */
    /* Unit u's pages resident when a run last measured it (mincore, at a
     * free), 0 while it is clean: what a run taken from it finds resident,
     * without a system call (span_take, span_give). */
    uint8_t res[SPAN_UNITS];
    /* The header slot of the live run at unit u, and the unit of the run
     * whose header is in slot i. */
    uint8_t slot_of[SPAN_UNITS], unit_of_slot[SPAN_UNITS];
    /* The block headers (large.c's), out of band in unit 0, a slot a live
     * run. A run takes the lowest free slot: the slots span 3 pages, and
     * a slot a unit put 8 blocks of 500 KB on all of them (3 faults a
     * segment); the first 60 or so runs share the fields' page. */
    _Alignas(8) unsigned char hdr[SPAN_UNITS - 1][SPAN_HEADER];
};
_Static_assert(sizeof(struct span_segment) <= SPAN_UNIT, "a span header fits in unit 0");
_Static_assert(SPAN_UNITS == UNITMAP_BITS, "a unitmap has a bit a unit");

/* An arena: segments, and a lock over them. A thread takes runs from its
 * heap's arena's segments (by the heap's tag: a thread that comes after
 * another that exited takes its parked heap, and so its arena and the
 * runs it left; dealt in turn, mstress's threads of each round spread
 * their runs over every arena, 16.4 -> 17.2 MiB of peak); a run goes back
 * to its segment's arena. */
struct span_arena {
    struct span_segment *open_head, *open_tail;
    /* The segments with a free unit again, by their longest free run: a
     * request looks at a few of those that fit, not at every header
     * (1,000 live 500 KB blocks left 143 segments with 7 free units each,
     * and a walk of them all put latency-touch's median malloc at 2.9
     * us). */
    struct span_segment *fits[SPAN_UNITS];
    /* The lengths whose fits[] list is not empty: a request finds the next
     * one up in a few words, not by walking up to 255 lists (a fresh
     * segment's is the last). */
    struct unitmap fits_held;
    /* Units in live runs, free and dirty units (resident, cached), and the
     * most units live since none was cached (the peak rule), under the
     * lock; `cached` and `empties` are read without it (span_holds). */
    size_t live, cached, peak;
    unsigned empties;           /* segments with no live run */
    struct large_arming arming;
};

#define SPAN_ARENAS 4
/* Zeroed, and untouched until a program takes a span block: 8.5 KiB that
 * with their locks' initializer made two pages of every process's
 * file-backed .data. */
static TABLE_BSS struct span_arena arenas[SPAN_ARENAS];
/* Bit i: arenas[i] has had a segment. The sweeps look at every arena
 * (span_expire, span_holds), and an arena's counts lie on three OS pages
 * of `.bss` that a program without span blocks need not fault in: on a
 * kernel that backs a read of untouched memory with a page of its own
 * (this guest's does; others map the shared zero page), reading them cost
 * every process 12 KiB. */
static unsigned arenas_used;

static unsigned arena_bit(const struct span_arena *a)
{
    return 1u << (a - arenas);
}

/* Whether arenas[i] ever had a segment: nothing to look at when not. */
static bool arena_used(unsigned i)
{
    return __atomic_load_n(&arenas_used, __ATOMIC_RELAXED) >> i & 1;
}

/* Each arena's lock, apart for its initializer. Adaptive: it spins a
 * while before it sleeps. Every span block takes it twice, for a few
 * hundred nanoseconds each time, so a waiter that slept paid a context
 * switch for it: two threads replacing live 64-128 KiB blocks at random
 * switched 14,800 times in 0.87 s; spinning, 0.61 s (glibc, with an arena
 * each, 0.48). */
static struct {
    _Alignas(64) pthread_mutex_t m;     /* a line each: threads of two arenas share none */
} arena_locks[SPAN_ARENAS] = {
    [0 ... SPAN_ARENAS - 1] = { PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP },
};
static __thread struct span_arena *tls_arena TLS_IE;

static pthread_mutex_t *arena_lock(const struct span_arena *a)
{
    return &arena_locks[a - arenas].m;
}

HOT_TEXT void span_arena_bind(unsigned tag)
{
    tls_arena = &arenas[tag % SPAN_ARENAS];
}

/* A thread with no heap takes from arena 0. */
static struct span_arena *arena_mine(void)
{
    return tls_arena ? tls_arena : &arenas[0];
}

/* When a thread last waited for an arena's lock, and whether one did within
 * SPAN_BUSY_MS (the sweeps' span_expire clears it): threads keep their
 * freed runs (span_keep.h) only then. A lone thread never waits, and a
 * run it kept is memory no other size can use: bufcycle's buffers of
 * ever-changing sizes took 15% longer, at 1 MiB more peak RSS. */
static uint64_t waited_at;
static bool busy;
#define SPAN_BUSY_MS 1000

static void span_lock_take(struct span_arena *a)
{
    if (lock_try(arena_lock(a)))
        return;
    __atomic_store_n(&waited_at, os_now_ms(), __ATOMIC_RELAXED);
    __atomic_store_n(&busy, true, __ATOMIC_RELAXED);
    lock_take(arena_lock(a));
}

HOT_TEXT bool span_busy(void)
{
    return __atomic_load_n(&busy, __ATOMIC_RELAXED);
}

static struct span_segment *segment_of_run(const void *p)
{
    return (struct span_segment *)((uintptr_t)p & ~(uintptr_t)SEGMENT_MASK);
}

static inline unsigned unit_of(const void *p)
{
    return (unsigned)(((uintptr_t)p & SEGMENT_MASK) >> SPAN_UNIT_SHIFT);
}

static inline char *unit_addr(struct span_segment *s, unsigned u)
{
    return (char *)s + ((size_t)u << SPAN_UNIT_SHIFT);
}

static void cached_add(struct span_arena *a, long n)
{
    __atomic_store_n(&a->cached, a->cached + (size_t)n, __ATOMIC_RELAXED);
}

static void empties_add(struct span_arena *a, int n)
{
    __atomic_store_n(&a->empties, a->empties + (unsigned)n, __ATOMIC_RELAXED);
}

/* ---- the gate ------------------------------------------------------------ */

/* How densely freed span blocks were written: a moving average, 0..256,
 * of the share of the pages not resident when a block was taken that
 * were when it was freed (mincore both times; a run of units already
 * resident says nothing, and is not counted). Units go from block
 * to block at other offsets whatever their sizes, so blocks that write a
 * page or two each (mstress writes a block's first and last page) left
 * the pages of all of them resident in the units they shared: 65% of the
 * cached units' pages, and a peak RSS of 18.7 MiB against 13.9 with a
 * mapping each, which only a block of about the same size reuses, at
 * the same offsets. Purging the freed units instead (batched, 32 ranges a
 * call) took it to 9.9 MiB but faulted them in again: 40,000 faults
 * against 12,000, 0.88 s against 0.39. So the gate shuts while freed
 * blocks are sparse, and requests go where they went before spans. Each
 * freed block weighs a quarter: at an eighth, a program's first dozen
 * untouched blocks took the span path before it shut, a system call each
 * (latency-free's p99 malloc(500000) 2.1 us against 0.08; now 5).
 *
 * A gate per run length in units (a bucket), not only one for the
 * process: git log -p reuses a 128 KiB buffer written to 48 KiB, whose
 * frees each measured 20 fresh pages with none written, and with one
 * gate those shut the span path for every size: its dozen other buffer
 * sizes of 32-256 KiB, written densely, went to medium classes of their
 * own, a class's pages each (25.3 MiB of peak against 23.6 with them on
 * spans; glibc 21.0). Runs longer than a new block's (grown ones) share
 * the last bucket. */
#define GATE_BUCKETS    ((SPAN_NEW_MAX >> SPAN_UNIT_SHIFT) + 1)
#define GATE_SHUT_BELOW 64      /* a quarter of the pages */
#define GATE_OPEN_FROM  192     /* three quarters */
#define GATE_PROBE      16      /* shut, one request in this many still comes */
#define GATE_FRESH_MIN  16      /* pages a run must find fresh to be noted */

/* A moving density and the gate it holds open or shut (hysteresis). */
struct gate { unsigned density; bool shut, noted; };

/* The program's gate over every note, which a bucket follows until a
 * block of its own is noted, and then starts its own from. Each bucket
 * on its own from the start: mstress, whose blocks of a few dozen sizes
 * all write their first and last page, took each size's five sparse
 * frees to shut its gate: 16.4 -> 18.3 MiB of peak, 0.204 -> 0.218 s. */
static struct gate gate_all = { 256, false, true };
static struct gate gates[GATE_BUCKETS];
static unsigned probe;

static unsigned gate_bucket(unsigned units)
{
    return units < GATE_BUCKETS ? units : GATE_BUCKETS - 1;
}

/* The bucket of a request of `size` bytes: its run's units (large.c's
 * large_place rounds a new block to pages, span_take to units). */
static unsigned gate_bucket_of(size_t size)
{
    if (size >= SPAN_NEW_MAX)
        return GATE_BUCKETS - 1;
    return gate_bucket((unsigned)(span_run_size(align_up(size ? size : 1, OS_PAGE)) >>
                                  SPAN_UNIT_SHIFT));
}

/* Moves g by one note of `share`; true when it opened or shut. Arenas
 * note under their own locks: an update may be lost, never torn. */
static bool gate_move(struct gate *g, unsigned share)
{
    unsigned d = (__atomic_load_n(&g->density, __ATOMIC_RELAXED) * 3 + share) / 4;
    __atomic_store_n(&g->density, d, __ATOMIC_RELAXED);
    bool was = __atomic_load_n(&g->shut, __ATOMIC_RELAXED);
    bool shut = was ? d < GATE_OPEN_FROM : d < GATE_SHUT_BELOW;
    if (shut == was)
        return false;
    __atomic_store_n(&g->shut, shut, __ATOMIC_RELAXED);
    return true;
}

/* Notes a freed block's run of `pages` (`units` long): `before` were
 * resident when it was taken, `after` now. Called with the lock held;
 * true when a gate moved (the caller tells malloc's lanes once the lock
 * is given back). */
static bool gate_note(unsigned units, unsigned before, unsigned after, unsigned pages)
{
    if (before > pages || pages - before < GATE_FRESH_MIN)
        return false;           /* too little was fresh to tell */
    unsigned fresh = pages - before, wrote = after > before ? after - before : 0;
    unsigned share = (wrote > fresh ? fresh : wrote) * 256 / fresh;
    struct gate *g = &gates[gate_bucket(units)];
    bool moved = false;
    if (!__atomic_load_n(&g->noted, __ATOMIC_RELAXED)) {
        /* Its first note: from here on its own, starting where the
         * program's gate stands. */
        __atomic_store_n(&g->density, __atomic_load_n(&gate_all.density, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&g->shut, __atomic_load_n(&gate_all.shut, __ATOMIC_RELAXED),
                         __ATOMIC_RELAXED);
        __atomic_store_n(&g->noted, true, __ATOMIC_RELAXED);
    }
    moved |= gate_move(&gate_all, share);
    moved |= gate_move(g, share);
    return moved;
}

/* Pages resident in the k units at u of s, measured (mincore) into
 * res[]. Callers: the run's owner (its res[] is its own while it lives). */
static unsigned run_measure(struct span_segment *s, unsigned u, unsigned k)
{
    return (unsigned)(os_resident_per(unit_addr(s, u), (size_t)k << SPAN_UNIT_SHIFT, SPAN_UNIT,
                                      &s->res[u]) / OS_PAGE);
}

/* The same from res[], as last measured. */
static unsigned run_sum(const struct span_segment *s, unsigned u, unsigned k)
{
    unsigned n = 0;
    for (unsigned i = u; i < u + k; i++)
        n += s->res[i];
    return n;
}

HOT_TEXT bool span_open_for(size_t size)
{
    const struct gate *g = &gates[gate_bucket_of(size)];
    if (!__atomic_load_n(&g->noted, __ATOMIC_RELAXED))
        g = &gate_all;
    return !__atomic_load_n(&g->shut, __ATOMIC_RELAXED);
}

bool span_wanted(size_t size)
{
    return span_open_for(size) || __atomic_add_fetch(&probe, 1, __ATOMIC_RELAXED) % GATE_PROBE == 0;
}

/* ---- the open list (lock held) ------------------------------------------ */

static void open_remove(struct span_segment *s)
{
    struct span_arena *a = s->arena;
    if (s->prev)
        s->prev->next = s->next;
    else
        a->open_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        a->open_tail = s->prev;
    s->prev = s->next = NULL;
}

/* Whether s is on the open list: it has a free unit. */
static bool open_listed(const struct span_segment *s)
{
    return s->prev || s->arena->open_head == s;
}

/* Puts s, which has a free unit, at the head (it is the newest freed into). */
static void open_push(struct span_segment *s)
{
    struct span_arena *a = s->arena;
    if (open_listed(s))
        open_remove(s);
    s->next = a->open_head;
    s->prev = NULL;
    if (a->open_head)
        a->open_head->prev = s;
    else
        a->open_tail = s;
    a->open_head = s;
}

/* ---- choosing a run (lock held) ----------------------------------------- */

static unsigned longest_run(const struct unitmap *m)
{
    unsigned best = 0, len;
    for (unsigned u = 0; unitmap_next_run(m, &u, &len); u += len)
        best = len > best ? len : best;
    return best;
}

/* The free run that holds unit u (free), in units. */
static unsigned run_around(const struct span_segment *s, unsigned u)
{
    unsigned start = (unsigned)(unitmap_find_back(&s->free, u, false) + 1);
    return unitmap_find(&s->free, u, false) - start;
}

/* Files s under fits[] by `now`, its longest free run (under none when 0:
 * full, or retired). Takes and gives keep it without a walk of every run
 * where they can: a give's joined run is the new longest or not, and a
 * take changes it only when it took from a run that long. */
static void fits_file(struct span_segment *s, unsigned now)
{
    if (now == s->longest)
        return;
    if (s->longest) {
        if (s->fprev)
            s->fprev->fnext = s->fnext;
        else if (!(s->arena->fits[s->longest] = s->fnext))
            unitmap_clear(&s->arena->fits_held, s->longest, 1);
        if (s->fnext)
            s->fnext->fprev = s->fprev;
    }
    s->longest = now;
    s->fprev = NULL;
    s->fnext = NULL;
    if (now) {
        struct span_arena *a = s->arena;
        s->fnext = a->fits[now];
        if (a->fits[now])
            a->fits[now]->fprev = s;
        a->fits[now] = s;
        unitmap_set(&a->fits_held, now, 1);
    }
}

/* Segments a request weighs before it takes the best of them. */
#define PICK_LOOK 8

struct span_pick { struct span_segment *s; unsigned u, clean, len; };

/* Weighs k units at u of s, in a free run of len: fewer units to fault
 * first, then the tighter fit. */
static void pick_weigh(struct span_pick *best, struct span_segment *s, unsigned u, unsigned k,
                       unsigned len)
{
    unsigned clean = k - unitmap_count(&s->dirty, u, k);
    if (!best->s || clean < best->clean || (clean == best->clean && len < best->len))
        *best = (struct span_pick){ s, u, clean, len };
}

/* Weighs a free run of len >= k units at u of s at both ends; true on a
 * perfect fit (no unit to fault, no unit to spare). Out of line: inlined
 * into both of pick_in's lanes it was 1.8 KiB more text, past the 16th
 * page (make image-pages), for a few instructions a take. */
static NOINLINE bool pick_weigh_run(struct span_pick *best, struct span_segment *s, unsigned u,
                                    unsigned len, unsigned k)
{
    /* Nothing to count where no place in the run could win: the best
     * already faults nothing, and this run is no tighter. */
    if (best->s && best->clean == 0 && len >= best->len)
        return false;
    pick_weigh(best, s, u, k, len);
    if (len > k)
        pick_weigh(best, s, u + len - k, k, len);
    return best->clean == 0 && best->len == k;
}

/* Weighs every free run of s of k units or more; true on a perfect fit. */
static bool pick_in(struct span_pick *best, struct span_segment *s, unsigned k)
{
    /* Its free units all in one run (a growing heap's segments: the tail
     * not carved yet): that run, found without the search below, which
     * was a third of such a take. The run is measured, not taken from
     * `longest`, so a miscount there could not hand out live units. */
    if (s->nfree == s->longest) {
        unsigned u = unitmap_find(&s->free, 0, true);
        unsigned len = unitmap_find(&s->free, u, false) - u;
        if (len == s->nfree && len >= k)
            return pick_weigh_run(best, s, u, len, k);
    }
    /* Only the runs of k or more: a fragmented segment has dozens of
     * shorter ones, and this runs under the lock. */
    struct unitmap fit = unitmap_runs_of(&s->free, k);
    unsigned n;
    for (unsigned u = 0; unitmap_next_run(&fit, &u, &n); u += n) {
        if (pick_weigh_run(best, s, u, n + k - 1, k))
            return true;
    }
    return false;
}

/* The best place for k units among the first PICK_LOOK segments that
 * have room, tightest first: each free run of k or more is tried at its
 * start and at its end (where its resident units may lie). best.s is
 * NULL when no segment has room. */
static struct span_pick pick_run(struct span_arena *a, unsigned k)
{
    struct span_pick best = { 0 };
    unsigned looked = 0;
    for (unsigned longest = k; (longest = unitmap_find(&a->fits_held, longest, true)) < SPAN_UNITS &&
                               looked < PICK_LOOK; longest++)
        for (struct span_segment *s = a->fits[longest]; s && looked < PICK_LOOK; s = s->fnext) {
            looked++;
            if (pick_in(&best, s, k))
                return best;
        }
    return best;
}

/* ---- purging and unmapping (lock held) ----------------------------------- */

/* Purges s's free and dirty units, run by run, until `want` are (all of
 * them when want is 0); whether it purged any. */
static bool purge_segment(struct span_segment *s, unsigned want)
{
    unsigned done = 0, len;
    struct unitmap m = unitmap_and(&s->free, &s->dirty);
    for (unsigned u = 0; (!want || done < want) && unitmap_next_run(&m, &u, &len); u += len) {
        os_purge(unit_addr(s, u), (size_t)len << SPAN_UNIT_SHIFT);
        unitmap_clear(&s->dirty, u, len);
        memset(&s->res[u], 0, len);
        done += len;
    }
    cached_add(s->arena, -(long)done);
    return done != 0;
}

/* Takes s, with no live run, off the list and the segmap, and onto *gone,
 * to be unmapped once the lock is given back. */
static void segment_retire(struct span_segment *s, struct span_segment **gone)
{
    struct unitmap m = unitmap_and(&s->dirty, &s->free);
    cached_add(s->arena, -(long)unitmap_count(&m, 0, SPAN_UNITS));
    empties_add(s->arena, -1);
    open_remove(s);
    fits_file(s, 0);
    segmap_set_range(s, SEGMENT_SIZE, TAG_NONE, TAG_NONE);
    s->magic = 0;
    s->next = *gone;
    *gone = s;
}

static void unmap_retired(struct span_segment *gone)
{
    while (gone) {
        struct span_segment *next = gone->next;
        segment_give_bare(gone);
        gone = next;
    }
}

/* The peak rule (span.h), after live grew into units it faults: purges
 * the oldest segments' cached units until it holds. */
static void fit_peak(struct span_arena *a)
{
    if (a->live > a->peak)
        a->peak = a->live;
    size_t slack = a->peak / SPAN_PEAK_SLACK;
    if (slack < SPAN_SLACK_MIN)
        slack = SPAN_SLACK_MIN;
    size_t bound = a->peak + slack;
    for (struct span_segment *s = a->open_tail; s && a->cached + a->live > bound; s = s->prev)
        purge_segment(s, (unsigned)(a->cached + a->live - bound));
}

/* ---- taking and giving back --------------------------------------------- */

/* A segment from the heaps' reservation or their cache of empty ones
 * (segment.h), which a retired one joins: what spans give back, a heap
 * takes, and the other way round. */
static struct span_segment *segment_map(struct span_arena *a)
{
    bool fresh;
    struct span_segment *s = segment_take_bare(&fresh);
    if (!s)
        return NULL;
    /* A heap's segment had its header past the first page too: those
     * pages go back (the units were purged before it was cached). */
    if (!fresh)
        os_purge((char *)s + OS_PAGE, SPAN_UNIT - OS_PAGE);
    s->prev = s->next = s->fprev = s->fnext = NULL;
    s->arena = a;
    if (!(__atomic_load_n(&arenas_used, __ATOMIC_RELAXED) & arena_bit(a)))
        __atomic_fetch_or(&arenas_used, arena_bit(a), __ATOMIC_RELAXED);
    s->longest = 0;
    s->magic = SPAN_MAGIC;
    memset(&s->free, 0, sizeof s->free);
    memset(&s->dirty, 0, sizeof s->dirty);
    memset(&s->starts, 0, sizeof s->starts);
    memset(&s->slots, 0, sizeof s->slots);
    unitmap_set(&s->free, 1, FREE_MAX);
    unitmap_set(&s->dirty, 0, 1);
    s->nfree = FREE_MAX;
    memset(s->res, 0, sizeof s->res);
    s->freed_at = os_now_ms();
    segmap_set_range(s, SEGMENT_SIZE, TAG_LARGE, TAG_LARGE);
    open_push(s);
    fits_file(s, FREE_MAX);
    empties_add(a, 1);
    return s;
}

/* Marks k units at u of s live, out of a free run of `run` units (0: not
 * known, measured here); returns those that were dirty. */
static struct unitmap units_take(struct span_segment *s, unsigned u, unsigned k, unsigned run)
{
    struct unitmap was = unitmap_range(&s->dirty, u, k);
    bool longest = (run ? run : run_around(s, u)) >= s->longest;
    if (s->nfree == FREE_MAX)
        empties_add(s->arena, -1);
    unitmap_clear(&s->free, u, k);
    unitmap_set(&s->dirty, u, k);
    s->nfree -= k;
    s->arena->live += k;
    cached_add(s->arena, -(long)unitmap_count(&was, u, k));
    if (!s->nfree)
        open_remove(s);
    if (longest)
        fits_file(s, longest_run(&s->free));
    return was;
}

/* Frees k live units at u of s (the run's new length at its start, if
 * any, is the caller's): kept resident when the program reuses large
 * blocks, else purged. A segment left with no live run and nothing
 * resident is retired past SPAN_EMPTY_KEEP such. */
static void units_give(struct span_segment *s, unsigned u, unsigned k, bool keep,
                       struct span_segment **gone)
{
    if (!keep) {
        os_purge(unit_addr(s, u), (size_t)k << SPAN_UNIT_SHIFT);
        os_purge_flush();
        unitmap_clear(&s->dirty, u, k);
        memset(&s->res[u], 0, k);
    } else {
        cached_add(s->arena, k);
    }
    unitmap_set(&s->free, u, k);
    s->nfree += k;
    s->arena->live -= k;
    s->freed_at = os_now_ms();
    open_push(s);
    unsigned joined = run_around(s, u);
    if (joined > s->longest)
        fits_file(s, joined);
    if (s->nfree != FREE_MAX)
        return;
    empties_add(s->arena, 1);
    if (!unitmap_count(&s->dirty, 1, FREE_MAX) && s->arena->empties > SPAN_EMPTY_KEEP)
        segment_retire(s, gone);
}

/* Gives the run starting at unit u of s the lowest free header slot (one
 * is: a live run has at least a unit) and marks u a start, last: free()
 * may read the slot once the bit is set. */
static unsigned slot_take(struct span_segment *s, unsigned u)
{
    unsigned slot = unitmap_find(&s->slots, 0, false);
    unitmap_set(&s->slots, slot, 1);
    s->slot_of[u] = (uint8_t)slot;
    s->unit_of_slot[slot] = (uint8_t)u;
    unitmap_store_bit(&s->starts, u, true);
    return slot;
}

static void slot_give(struct span_segment *s, unsigned u)
{
    unitmap_store_bit(&s->starts, u, false);
    unitmap_clear(&s->slots, s->slot_of[u], 1);
}

/* Clears [from, to) of the run at u, where its units were dirty: a
 * stretch of dirty units at a time, through os_zero. A unit is dirty once
 * handed out, written or not: a calloc'd buffer its program never wrote
 * left its units dirty, and clearing them whole faulted in pages nobody
 * had touched. */
static void units_clear(struct span_segment *s, unsigned u, const struct unitmap *dirty,
                        size_t from, size_t to)
{
    char *run = unit_addr(s, u);
    for (unsigned d = u; from < to && (d = unitmap_find(dirty, d, true)) < SPAN_UNITS;) {
        unsigned e = unitmap_find(dirty, d, false);
        size_t lo = (size_t)(d - u) << SPAN_UNIT_SHIFT, hi = (size_t)(e - u) << SPAN_UNIT_SHIFT;
        lo = lo > from ? lo : from;
        hi = hi < to ? hi : to;
        if (lo < hi) {
            os_mark_defined(run + lo, hi - lo);
            os_zero(run + lo, hi - lo);
        }
        if (hi >= to)
            break;
        d = e;
    }
}

void *span_take(size_t bytes, size_t clear_from, size_t clear_to, void **hdr)
{
    unsigned k = (unsigned)(span_run_size(bytes) >> SPAN_UNIT_SHIFT);
    struct span_arena *a = arena_mine();
    large_arming_request(&a->arming);
    span_lock_take(a);
    struct span_pick p = pick_run(a, k);
    if (!p.s) {
        p.s = segment_map(a);
        p.u = 1;
        p.clean = k;
        p.len = FREE_MAX;
    }
    struct unitmap dirty = { 0 };
    unsigned slot = 0;
    if (p.s) {
        dirty = units_take(p.s, p.u, k, p.len);
        slot = slot_take(p.s, p.u);
        if (p.clean)
            fit_peak(a);
    }
    os_purge_flush();
    lock_give(arena_lock(a));
    if (!p.s)
        return NULL;
    /* Outside the lock: only the run's owner touches it until it is freed
     * (the freeing thread got the pointer from this one). */
    units_clear(p.s, p.u, &dirty, clear_from, clear_to);
    *hdr = p.s->hdr[slot];
    return unit_addr(p.s, p.u);
}

void span_give(void *run, size_t bytes)
{
    struct span_segment *s = segment_of_run(run), *gone = NULL;
    unsigned u = unit_of(run), k = (unsigned)(bytes >> SPAN_UNIT_SHIFT);
    /* What was resident when the run was taken is what its units measured
     * last: a take asks no system call (a mincore there cost a block
     * reused in a loop 0.5-4 us a malloc). Nothing to learn (and no call)
     * when the run was resident whole or nearly: the units keep their
     * counts. */
    unsigned pages = (unsigned)(bytes / OS_PAGE), before = run_sum(s, u, k);
    unsigned after = before + 16 > pages ? before : run_measure(s, u, k);
    struct span_arena *a = s->arena;
    bool keep = large_arming_free(&a->arming);
    span_lock_take(a);
    slot_give(s, u);
    units_give(s, u, k, keep, &gone);
    bool moved = gate_note(k, before, after, pages);
    lock_give(arena_lock(a));
    unmap_retired(gone);
    if (moved)
        init_lanes_changed();
    if (keep)
        background_poke();      /* it purges them if nobody else does */
}

bool span_resize(void *run, size_t old_bytes, size_t new_bytes)
{
    struct span_segment *s = segment_of_run(run), *gone = NULL;
    unsigned u = unit_of(run), ko = (unsigned)(old_bytes >> SPAN_UNIT_SHIFT);
    unsigned kn = (unsigned)(span_run_size(new_bytes) >> SPAN_UNIT_SHIFT);
    if (kn == ko)
        return true;
    if (kn > SPAN_MAX_UNITS || u + kn > SPAN_UNITS)
        return false;
    struct span_arena *a = s->arena;
    bool keep = kn < ko && large_arming_free(&a->arming);
    bool done = true;
    span_lock_take(a);
    if (kn < ko) {
        units_give(s, u + kn, ko - kn, keep, &gone);
    } else {
        bool faults = !unitmap_all(&s->dirty, u + ko, kn - ko);
        if (!unitmap_all(&s->free, u + ko, kn - ko)) {
            done = false;
        } else if (faults) {
            struct span_pick warm = pick_run(a, kn);
            done = !warm.s || warm.clean;   /* a resident run takes it whole: a copy beats faults */
        }
        if (done) {
            units_take(s, u + ko, kn - ko, 0);
            if (faults)
                fit_peak(a);
        }
    }
    os_purge_flush();
    lock_give(arena_lock(a));
    unmap_retired(gone);
    return done;
}

bool span_is_segment(const void *seg)
{
    return ((const struct span_segment *)seg)->magic == SPAN_MAGIC;
}

void *span_header_at(const void *p)
{
    struct span_segment *s = segment_of_run(p);
    unsigned u = unit_of(p);
    if (u == 0 || !unitmap_load_bit(&s->starts, u))
        return NULL;
    return s->hdr[s->slot_of[u]];
}

void *span_run_of(const void *hdr)
{
    struct span_segment *s = segment_of_run(hdr);
    size_t slot = (size_t)((const unsigned char *)hdr - &s->hdr[0][0]) / SPAN_HEADER;
    return unit_addr(s, s->unit_of_slot[slot]);
}

static bool arena_holds(struct span_arena *a)
{
    return __atomic_load_n(&a->cached, __ATOMIC_RELAXED) != 0 ||
           __atomic_load_n(&a->empties, __ATOMIC_RELAXED) != 0;
}

/* span_expire for one arena: true when it gave memory back. */
static bool arena_expire(struct span_arena *a, bool all, uint64_t now)
{
    if (!all && !arena_holds(a))
        return false;
    struct span_segment *gone = NULL;
    bool purged = false;
    if (all)
        lock_take(arena_lock(a));
    else if (!lock_try(arena_lock(a)))
        return false;
    const size_t warm_units = LARGE_WARM_BYTES >> SPAN_UNIT_SHIFT;
    for (struct span_segment *s = a->open_tail; s;) {
        struct span_segment *prev = s->prev;
        bool old = all || now - s->freed_at >= LARGE_CACHE_EXPIRE_MS;
        if (!old && !large_expired(now, s->freed_at, a->cached << SPAN_UNIT_SHIFT))
            break;          /* the rest were freed into later */
        /* Past purge_delay only the units beyond the warm reserve go;
         * the segment stays mapped for the next request until it is old. */
        purged |= purge_segment(s, old ? 0 : (unsigned)(a->cached - warm_units));
        if (old && s->nfree == FREE_MAX)
            segment_retire(s, &gone);
        s = prev;
    }
    if (!a->cached) {
        a->peak = a->live;  /* the next peak is measured afresh */
        if (all || purged)
            large_arming_reset(&a->arming);
    }
    os_purge_flush();
    lock_give(arena_lock(a));
    unmap_retired(gone);
    return purged || gone;
}

HOT_TEXT bool span_expire(bool all)
{
    uint64_t now = os_now_ms();
    if (span_busy() && now - __atomic_load_n(&waited_at, __ATOMIC_RELAXED) >= SPAN_BUSY_MS)
        __atomic_store_n(&busy, false, __ATOMIC_RELAXED);
    bool gave = false;
    for (unsigned i = 0; i < SPAN_ARENAS; i++)
        if (arena_used(i))
            gave |= arena_expire(&arenas[i], all, now);
    return gave;
}

size_t span_cached_bytes(void)
{
    size_t units = 0;
    for (unsigned i = 0; i < SPAN_ARENAS; i++)
        if (arena_used(i))
            units += __atomic_load_n(&arenas[i].cached, __ATOMIC_RELAXED);
    return units << SPAN_UNIT_SHIFT;
}

bool span_holds(void)
{
    for (unsigned i = 0; i < SPAN_ARENAS; i++)
        if (arena_used(i) && arena_holds(&arenas[i]))
            return true;
    return false;
}

HOT_TEXT void span_fork_prepare(void)
{
    for (unsigned i = 0; i < SPAN_ARENAS; i++)
        pthread_mutex_lock(&arena_locks[i].m);
}

HOT_TEXT void span_fork_parent(void)
{
    for (unsigned i = SPAN_ARENAS; i-- > 0;)
        pthread_mutex_unlock(&arena_locks[i].m);
}

HOT_TEXT void span_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    for (unsigned i = 0; i < SPAN_ARENAS; i++)
        arena_locks[i].m = fresh;
}
