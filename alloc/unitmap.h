/*
 * unitmap.h - a bitmap with one bit per span unit of a segment (span.h):
 * which units are free, dirty, or start a live run. span.c's only view of
 * bits; everything here is inline and takes ranges [u, u + k).
 *
 * A segment has more units than a word has bits (16 KiB units: 256), so a
 * range or a run may cross words: each operation walks the words the
 * range touches, a handful at most. Runs of set bits are what span.c
 * looks for (a free run to take, a dirty run to purge), so a search for
 * the next set or clear bit from a position is the primitive.
 */
#ifndef TALLY_UNITMAP_H
#define TALLY_UNITMAP_H

#include "internal.h"

#define UNITMAP_BITS  256u
#define UNITMAP_WORDS (UNITMAP_BITS / 64)

struct unitmap {
    uint64_t w[UNITMAP_WORDS];
};

/* Ranges [u, u + k) have k >= 1 and u + k <= UNITMAP_BITS. Each
 * operation takes the words before the range's last with the first one's
 * mask (all bits after it), then the last word with the mask of its end
 * too: a span take and give set, clear and count a few ranges each, and a
 * mask worked out word by word with a test per bound (a word's share of
 * the range) was a fifth of a growing heap's take. */
static inline uint64_t unitmap_first_mask(unsigned u) { return ~(uint64_t)0 << (u & 63); }
static inline uint64_t unitmap_last_mask(unsigned u, unsigned k)
{
    return ~(uint64_t)0 >> (63 - ((u + k - 1) & 63));
}

static inline void unitmap_set(struct unitmap *m, unsigned u, unsigned k)
{
    unsigned i = u / 64, j = (u + k - 1) / 64;
    uint64_t mask = unitmap_first_mask(u);
    for (; i < j; i++, mask = ~(uint64_t)0)
        m->w[i] |= mask;
    m->w[j] |= mask & unitmap_last_mask(u, k);
}

static inline void unitmap_clear(struct unitmap *m, unsigned u, unsigned k)
{
    unsigned i = u / 64, j = (u + k - 1) / 64;
    uint64_t mask = unitmap_first_mask(u);
    for (; i < j; i++, mask = ~(uint64_t)0)
        m->w[i] &= ~mask;
    m->w[j] &= ~(mask & unitmap_last_mask(u, k));
}

/* Set bits of w. Not __builtin_popcountll: the baseline x86-64 the
 * library is built for has no popcnt instruction, so GCC called libgcc's
 * __popcountdi2, a table walk (147 instructions of a span block's
 * malloc+free pair, whose takes and gives count units a few times each). */
static inline unsigned unitmap_popcount(uint64_t w)
{
    w -= (w >> 1) & 0x5555555555555555ULL;
    w = (w & 0x3333333333333333ULL) + ((w >> 2) & 0x3333333333333333ULL);
    w = (w + (w >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (unsigned)((w * 0x0101010101010101ULL) >> 56);
}

/* Set bits in [u, u + k). */
static inline unsigned unitmap_count(const struct unitmap *m, unsigned u, unsigned k)
{
    unsigned i = u / 64, j = (u + k - 1) / 64, n = 0;
    uint64_t mask = unitmap_first_mask(u);
    for (; i < j; i++, mask = ~(uint64_t)0)
        n += unitmap_popcount(m->w[i] & mask);
    return n + unitmap_popcount(m->w[j] & mask & unitmap_last_mask(u, k));
}

static inline bool unitmap_all(const struct unitmap *m, unsigned u, unsigned k)
{
    return unitmap_count(m, u, k) == k;
}

/* The first unit at or after `from` whose bit is `set`, or UNITMAP_BITS.
 * (The first word masked before the loop, not tested for in it: a span
 * take, which finds runs by these two, took 1,400 instructions, a tenth
 * of them that test.) */
static inline unsigned unitmap_find(const struct unitmap *m, unsigned from, bool set)
{
    unsigned i = from / 64;
    if (i >= UNITMAP_WORDS)
        return UNITMAP_BITS;
    uint64_t flip = set ? 0 : ~(uint64_t)0;
    uint64_t w = (m->w[i] ^ flip) & (~(uint64_t)0 << (from & 63));
    while (!w) {
        if (++i == UNITMAP_WORDS)
            return UNITMAP_BITS;
        w = m->w[i] ^ flip;
    }
    return i * 64 + (unsigned)__builtin_ctzll(w);
}

/* The last unit at or before `from` (< UNITMAP_BITS) whose bit is `set`,
 * or -1. */
static inline int unitmap_find_back(const struct unitmap *m, unsigned from, bool set)
{
    int i = (int)(from / 64);
    uint64_t flip = set ? 0 : ~(uint64_t)0;
    uint64_t w = (m->w[i] ^ flip) & (~(uint64_t)0 >> (63 - (from & 63)));
    while (!w) {
        if (--i < 0)
            return -1;
        w = m->w[i] ^ flip;
    }
    return i * 64 + 63 - __builtin_clzll(w);
}

/* The next run of set bits at or after *u: its first unit in *u and its
 * length in *len; false when there is none. The caller steps past it
 * with *u += *len. */
static inline bool unitmap_next_run(const struct unitmap *m, unsigned *u, unsigned *len)
{
    if (*u >= UNITMAP_BITS)
        return false;
    unsigned start = unitmap_find(m, *u, true);
    if (start >= UNITMAP_BITS)
        return false;
    *u = start;
    *len = unitmap_find(m, start, false) - start;
    return true;
}

static inline struct unitmap unitmap_and(const struct unitmap *a, const struct unitmap *b)
{
    struct unitmap r;
    for (unsigned i = 0; i < UNITMAP_WORDS; i++)
        r.w[i] = a->w[i] & b->w[i];
    return r;
}

/* The bits of a in [u, u + k) alone. */
static inline struct unitmap unitmap_range(const struct unitmap *a, unsigned u, unsigned k)
{
    struct unitmap r = { { 0 } };
    unsigned i = u / 64, j = (u + k - 1) / 64;
    uint64_t mask = unitmap_first_mask(u);
    for (; i < j; i++, mask = ~(uint64_t)0)
        r.w[i] = a->w[i] & mask;
    r.w[j] = a->w[j] & mask & unitmap_last_mask(u, k);
    return r;
}

/* m shifted toward unit 0 by n < UNITMAP_BITS: bit u of the result is
 * bit u + n of m. */
static inline struct unitmap unitmap_shift_down(const struct unitmap *m, unsigned n)
{
    struct unitmap r;
    unsigned words = n / 64, bits = n & 63;
    if (words == 0 && bits != 0) {      /* runs_of's steps below 64: no branch a word */
        for (unsigned i = 0; i + 1 < UNITMAP_WORDS; i++)
            r.w[i] = m->w[i] >> bits | m->w[i + 1] << (64 - bits);
        r.w[UNITMAP_WORDS - 1] = m->w[UNITMAP_WORDS - 1] >> bits;
        return r;
    }
    for (unsigned i = 0; i < UNITMAP_WORDS; i++) {
        uint64_t lo = i + words < UNITMAP_WORDS ? m->w[i + words] : 0;
        uint64_t hi = i + words + 1 < UNITMAP_WORDS ? m->w[i + words + 1] : 0;
        r.w[i] = bits ? lo >> bits | hi << (64 - bits) : lo;
    }
    return r;
}

/* The units at which a run of k (>= 1) set bits of m starts: a run of
 * len >= k at u shows as the len - k + 1 bits from u. Doubling: after
 * each step, bit u says the `have` bits from u are all set. */
static inline struct unitmap unitmap_runs_of(const struct unitmap *m, unsigned k)
{
    struct unitmap r = *m;
    for (unsigned have = 1; have < k;) {
        unsigned step = have < k - have ? have : k - have;
        struct unitmap s = unitmap_shift_down(&r, step);
        r = unitmap_and(&r, &s);
        have += step;
    }
    return r;
}

/* Unit u's bit, set or cleared with one relaxed store, read with one
 * relaxed load: for `starts`, which free() reads without the lock. */
static inline void unitmap_store_bit(struct unitmap *m, unsigned u, bool on)
{
    uint64_t bit = (uint64_t)1 << (u & 63), w = m->w[u / 64];
    __atomic_store_n(&m->w[u / 64], on ? w | bit : w & ~bit, __ATOMIC_RELAXED);
}

static inline bool unitmap_load_bit(const struct unitmap *m, unsigned u)
{
    return __atomic_load_n(&m->w[u / 64], __ATOMIC_RELAXED) >> (u & 63) & 1;
}

#endif
