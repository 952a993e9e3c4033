/*
 * span.c - span segments: runs of 64 KiB units for large blocks up to
 * half a segment (see the header), and the gate that says whether the
 * program's blocks are worth serving from them.
 *
 * One lock over all of it: a request here writes hundreds of KiB, so a
 * lock is noise beside it. Every segment with a free unit is on the open
 * list, the one freed into last at its head (expiry and the peak rule
 * take the oldest first), and filed under fits[] by its longest free run
 * (a request weighs a few that fit). A segment's state is three words of
 * units, free, dirty (written since it was mapped or last purged) and
 * run starts, then each run's block header and the pages resident when
 * it was taken (the gate's measure), all in its first page.
 *
 * Units are purged with the lock held, and the purges flushed before it
 * is given back (os.h's batches): once it is, another thread may take
 * and write them.
 */
#include "span.h"
#include "segment.h"
#include "os.h"
#include "lock.h"
#include "large_cache.h"
#include "background.h"
#include "init.h"

#include <pthread.h>
#include <string.h>

#define SPAN_MAGIC 0x7a115ba115e6ULL
#define ALL_FREE   (~(uint64_t)1)       /* units 1..63: unit 0 is the header's */

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
 * (tcmalloc 16.2). */
#define SPAN_SLACK_MIN  SPAN_UNITS
/* Segments with no live run kept mapped until they expire: one unmapped
 * as soon as its last run went, and mapped again by the next request,
 * cost a program whose live set swings (mstress) 1,800 mmap and munmap
 * calls, each under the lock. */
#define SPAN_EMPTY_KEEP 8

struct span_segment {
    uint64_t magic;
    uint64_t free;          /* units in no live run */
    uint64_t dirty;         /* units maybe resident: written since mapped or purged */
    uint64_t freed_at;      /* ms of the last free into it: the list's order */
    struct span_segment *prev, *next;   /* the open list, while it has a free unit */
    struct span_segment *fprev, *fnext; /* fits[longest], while it has a free unit */
    uint64_t starts;        /* units a live run starts at */
    unsigned longest;       /* its longest free run, in units */
    /* Unit u's pages resident when a run last measured it (mincore, at a
     * free), 0 while it is clean: what a run taken from it finds resident,
     * without a system call (span_take, span_give). */
    uint8_t res[SPAN_UNITS];
    /* The block header of the run at unit u (large.c's) in hdr[u - 1]:
     * with them, the whole header is one OS page, so a new segment costs
     * one fault, not one a block. */
    _Alignas(8) unsigned char hdr[SPAN_UNITS - 1][SPAN_HEADER];
};
_Static_assert(sizeof(struct span_segment) <= OS_PAGE, "a span header is one page");

static pthread_mutex_t span_lock = PTHREAD_MUTEX_INITIALIZER;
static struct span_segment *open_head, *open_tail;
/* The segments with a free unit again, by their longest free run: a
 * request looks at a few of those that fit, not at every header (1,000
 * live 500 KB blocks left 143 segments with 7 free units each, and a walk
 * of them all put latency-touch's median malloc at 2.9 us). */
static struct span_segment *fits[SPAN_UNITS];
/* Segments a request weighs before it takes the best of them. */
#define PICK_LOOK 8
/* Units in live runs, free and dirty units (resident, cached), and the
 * most units live since none was cached (the peak rule), under the lock;
 * `cached` and `empties` are read without it (span_holds). */
static size_t live, cached, peak;
static unsigned empties;        /* segments with no live run */
static struct large_arming arming;

static inline uint64_t units_mask(unsigned u, unsigned k)
{
    return (((uint64_t)1 << k) - 1) << u;     /* k <= 63 */
}

static inline unsigned units_count(uint64_t m) { return (unsigned)__builtin_popcountll(m); }

/* Takes the lowest run of set bits off *m: its first bit in *u and its
 * length in *len; false when *m has none. */
static inline bool units_next_run(uint64_t *m, unsigned *u, unsigned *len)
{
    if (!*m)
        return false;
    *u = (unsigned)__builtin_ctzll(*m);
    uint64_t rest = ~(*m >> *u);
    *len = rest ? (unsigned)__builtin_ctzll(rest) : 64 - *u;
    *m &= ~units_mask(*u, *len);
    return true;
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

static void cached_add(long n)
{
    __atomic_store_n(&cached, cached + (size_t)n, __ATOMIC_RELAXED);
}

static void empties_add(int n)
{
    __atomic_store_n(&empties, empties + (unsigned)n, __ATOMIC_RELAXED);
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
 * (latency-free's p99 malloc(500000) 2.1 us against 0.08; now 5). */
static unsigned density = 256;
static bool gate_open = true;
static unsigned probe;
#define GATE_SHUT_BELOW 64      /* a quarter of the pages */
#define GATE_OPEN_FROM  192     /* three quarters */
#define GATE_PROBE      16      /* shut, one request in this many still comes */

/* Notes a freed block's run of `pages`: `before` were resident when it
 * was taken, `after` now. Called with the lock held; true when the gate
 * moved (the caller tells malloc's lanes once the lock is given back). */
static bool gate_note(unsigned before, unsigned after, unsigned pages)
{
    enum { UNIT_PAGES = SPAN_UNIT / OS_PAGE };
    if (before > pages || pages - before < UNIT_PAGES)
        return false;           /* too little was fresh to tell */
    unsigned fresh = pages - before, wrote = after > before ? after - before : 0;
    unsigned share = (wrote > fresh ? fresh : wrote) * 256 / fresh;
    density = (density * 3 + share) / 4;
    bool open = gate_open ? density >= GATE_SHUT_BELOW : density >= GATE_OPEN_FROM;
    if (open == gate_open)
        return false;
    __atomic_store_n(&gate_open, open, __ATOMIC_RELAXED);
    return true;
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

bool span_gate(void)
{
    return __atomic_load_n(&gate_open, __ATOMIC_RELAXED);
}

bool span_wanted(void)
{
    return span_gate() || __atomic_add_fetch(&probe, 1, __ATOMIC_RELAXED) % GATE_PROBE == 0;
}

/* ---- the open list (lock held) ------------------------------------------ */

static void open_remove(struct span_segment *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        open_head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        open_tail = s->prev;
    s->prev = s->next = NULL;
}

/* Whether s is on the open list: it has a free unit. */
static bool open_listed(const struct span_segment *s)
{
    return s->prev || open_head == s;
}

/* Puts s, which has a free unit, at the head (it is the newest freed into). */
static void open_push(struct span_segment *s)
{
    if (open_listed(s))
        open_remove(s);
    s->next = open_head;
    s->prev = NULL;
    if (open_head)
        open_head->prev = s;
    else
        open_tail = s;
    open_head = s;
}

/* ---- choosing a run (lock held) ----------------------------------------- */

static unsigned longest_run(uint64_t m)
{
    unsigned best = 0, u, len;
    while (units_next_run(&m, &u, &len))
        best = len > best ? len : best;
    return best;
}

/* Files s under fits[] by its longest free run (none when full, or when
 * `gone`). */
static void fits_update(struct span_segment *s, bool gone)
{
    unsigned now = gone ? 0 : longest_run(s->free);
    if (now == s->longest)
        return;
    if (s->longest) {
        if (s->fprev)
            s->fprev->fnext = s->fnext;
        else
            fits[s->longest] = s->fnext;
        if (s->fnext)
            s->fnext->fprev = s->fprev;
    }
    s->longest = now;
    s->fprev = NULL;
    s->fnext = NULL;
    if (now) {
        s->fnext = fits[now];
        if (fits[now])
            fits[now]->fprev = s;
        fits[now] = s;
    }
}

struct span_pick { struct span_segment *s; unsigned u, clean, len; };

/* Weighs k units at u of s, in a free run of len: fewer units to fault
 * first, then the tighter fit. */
static void pick_weigh(struct span_pick *best, struct span_segment *s, unsigned u, unsigned k,
                       unsigned len)
{
    unsigned clean = k - units_count(s->dirty & units_mask(u, k));
    if (!best->s || clean < best->clean || (clean == best->clean && len < best->len))
        *best = (struct span_pick){ s, u, clean, len };
}

/* Weighs every free run of s of k units or more; true on a perfect fit
 * (no unit to fault, no unit to spare). */
static bool pick_in(struct span_pick *best, struct span_segment *s, unsigned k)
{
    unsigned u, len;
    for (uint64_t m = s->free; units_next_run(&m, &u, &len);) {
        if (len < k)
            continue;
        pick_weigh(best, s, u, k, len);
        if (len > k)
            pick_weigh(best, s, u + len - k, k, len);
        if (best->clean == 0 && best->len == k)
            return true;
    }
    return false;
}

/* The best place for k units among the first PICK_LOOK segments that
 * have room, tightest first: each free run of k or more is tried at its
 * start and at its end (where its resident units may lie). best.s is
 * NULL when no segment has room. */
static struct span_pick pick_run(unsigned k)
{
    struct span_pick best = { 0 };
    unsigned looked = 0;
    for (unsigned longest = k; longest < SPAN_UNITS && looked < PICK_LOOK; longest++)
        for (struct span_segment *s = fits[longest]; s && looked < PICK_LOOK; s = s->fnext) {
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
    unsigned done = 0;
    uint64_t m = s->free & s->dirty;
    unsigned u, len;
    while ((!want || done < want) && units_next_run(&m, &u, &len)) {
        os_purge(unit_addr(s, u), (size_t)len << SPAN_UNIT_SHIFT);
        s->dirty &= ~units_mask(u, len);
        memset(&s->res[u], 0, len);
        done += len;
    }
    cached_add(-(long)done);
    return done != 0;
}

/* Takes s, with no live run, off the list and the segmap, and onto *gone,
 * to be unmapped once the lock is given back. */
static void segment_retire(struct span_segment *s, struct span_segment **gone)
{
    cached_add(-(long)units_count(s->dirty & s->free));
    empties_add(-1);
    open_remove(s);
    fits_update(s, true);
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
static void fit_peak(void)
{
    if (live > peak)
        peak = live;
    size_t slack = peak / SPAN_PEAK_SLACK;
    if (slack < SPAN_SLACK_MIN)
        slack = SPAN_SLACK_MIN;
    size_t bound = peak + slack;
    for (struct span_segment *s = open_tail; s && cached + live > bound; s = s->prev)
        purge_segment(s, (unsigned)(cached + live - bound));
}

/* ---- taking and giving back --------------------------------------------- */

/* A segment from the heaps' reservation or their cache of empty ones
 * (segment.h), which a retired one joins: what spans give back, a heap
 * takes, and the other way round. */
static struct span_segment *segment_map(void)
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
    s->longest = 0;
    s->magic = SPAN_MAGIC;
    s->free = ALL_FREE;
    s->dirty = 1;
    memset(s->res, 0, sizeof s->res);
    s->freed_at = os_now_ms();
    s->starts = 0;
    segmap_set_range(s, SEGMENT_SIZE, TAG_LARGE, TAG_LARGE);
    open_push(s);
    fits_update(s, false);
    empties_add(1);
    return s;
}

/* Marks k units at u of s live; returns those that were dirty. */
static uint64_t units_take(struct span_segment *s, unsigned u, unsigned k)
{
    uint64_t mk = units_mask(u, k), was = s->dirty & mk;
    if (s->free == ALL_FREE)
        empties_add(-1);
    s->free &= ~mk;
    s->dirty |= mk;
    live += k;
    cached_add(-(long)units_count(was));
    if (!s->free)
        open_remove(s);
    fits_update(s, false);
    return was;
}

/* Frees k live units at u of s (the run's new length at its start, if
 * any, is the caller's): kept resident when the program reuses large
 * blocks, else purged. A segment left with no live run and nothing
 * resident is retired past SPAN_EMPTY_KEEP such. */
static void units_give(struct span_segment *s, unsigned u, unsigned k, bool keep,
                       struct span_segment **gone)
{
    uint64_t mk = units_mask(u, k);
    if (!keep) {
        os_purge(unit_addr(s, u), (size_t)k << SPAN_UNIT_SHIFT);
        os_purge_flush();
        s->dirty &= ~mk;
        memset(&s->res[u], 0, k);
    } else {
        cached_add(k);
    }
    s->free |= mk;
    live -= k;
    s->freed_at = os_now_ms();
    open_push(s);
    fits_update(s, false);
    if (s->free != ALL_FREE)
        return;
    empties_add(1);
    if (!(s->dirty & ALL_FREE) && empties > SPAN_EMPTY_KEEP)
        segment_retire(s, gone);
}

/* Clears [from, to) of the run at u, where its units were dirty. */
static void units_clear(struct span_segment *s, unsigned u, uint64_t dirty, size_t from,
                        size_t to)
{
    char *run = unit_addr(s, u);
    while (dirty && from < to) {
        unsigned d = (unsigned)__builtin_ctzll(dirty);
        size_t lo = (size_t)(d - u) << SPAN_UNIT_SHIFT, hi = lo + SPAN_UNIT;
        lo = lo > from ? lo : from;
        hi = hi < to ? hi : to;
        if (lo < hi) {
            os_mark_defined(run + lo, hi - lo);
            memset(run + lo, 0, hi - lo);
        }
        dirty &= dirty - 1;
    }
}

void *span_take(size_t bytes, size_t clear_from, size_t clear_to, void **hdr)
{
    unsigned k = (unsigned)(span_run_size(bytes) >> SPAN_UNIT_SHIFT);
    large_arming_request(&arming);
    lock_take(&span_lock);
    struct span_pick p = pick_run(k);
    if (!p.s) {
        p.s = segment_map();
        p.u = 1;
        p.clean = k;
    }
    uint64_t dirty = 0;
    if (p.s) {
        dirty = units_take(p.s, p.u, k);
        __atomic_store_n(&p.s->starts, p.s->starts | (uint64_t)1 << p.u, __ATOMIC_RELAXED);
        if (p.clean)
            fit_peak();
    }
    os_purge_flush();
    lock_give(&span_lock);
    if (!p.s)
        return NULL;
    /* Outside the lock: only the run's owner touches it until it is freed
     * (the freeing thread got the pointer from this one). */
    units_clear(p.s, p.u, dirty, clear_from, clear_to);
    *hdr = p.s->hdr[p.u - 1];
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
    bool keep = large_arming_free(&arming);
    lock_take(&span_lock);
    __atomic_store_n(&s->starts, s->starts & ~((uint64_t)1 << u), __ATOMIC_RELAXED);
    units_give(s, u, k, keep, &gone);
    bool moved = gate_note(before, after, pages);
    lock_give(&span_lock);
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
    bool keep = kn < ko && large_arming_free(&arming);
    bool done = true;
    lock_take(&span_lock);
    if (kn < ko) {
        units_give(s, u + kn, ko - kn, keep, &gone);
    } else {
        uint64_t grow = units_mask(u + ko, kn - ko);
        bool faults = (s->dirty & grow) != grow;
        if ((s->free & grow) != grow) {
            done = false;
        } else if (faults) {
            struct span_pick warm = pick_run(kn);
            done = !warm.s || warm.clean;   /* a resident run takes it whole: a copy beats faults */
        }
        if (done) {
            units_take(s, u + ko, kn - ko);
            if (faults)
                fit_peak();
        }
    }
    os_purge_flush();
    lock_give(&span_lock);
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
    if (u == 0 || !(__atomic_load_n(&s->starts, __ATOMIC_RELAXED) >> u & 1))
        return NULL;
    return s->hdr[u - 1];
}

void *span_run_of(const void *hdr)
{
    struct span_segment *s = segment_of_run(hdr);
    size_t u = (size_t)((const unsigned char *)hdr - &s->hdr[0][0]) / SPAN_HEADER + 1;
    return unit_addr(s, (unsigned)u);
}

bool span_expire(bool all)
{
    if (!all && !span_holds())
        return false;
    struct span_segment *gone = NULL;
    bool purged = false;
    uint64_t now = os_now_ms();
    if (all)
        lock_take(&span_lock);
    else if (!lock_try(&span_lock))
        return false;
    for (struct span_segment *s = open_tail; s;) {
        struct span_segment *prev = s->prev;
        if (!all && now - s->freed_at < LARGE_CACHE_EXPIRE_MS)
            break;          /* the rest were freed into later */
        purged |= purge_segment(s, 0);
        if (s->free == ALL_FREE)
            segment_retire(s, &gone);
        s = prev;
    }
    if (!cached) {
        peak = live;        /* the next peak is measured afresh */
        if (all || purged)
            large_arming_reset(&arming);
    }
    os_purge_flush();
    lock_give(&span_lock);
    bool gave = purged || gone;
    unmap_retired(gone);
    return gave;
}

bool span_holds(void)
{
    return __atomic_load_n(&cached, __ATOMIC_RELAXED) != 0 ||
           __atomic_load_n(&empties, __ATOMIC_RELAXED) != 0;
}

void span_fork_prepare(void) { pthread_mutex_lock(&span_lock); }
void span_fork_parent(void) { pthread_mutex_unlock(&span_lock); }
void span_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    span_lock = fresh;
}
