/*
 * test_unitmap.c - the span unit bitmap's operations (alloc/unitmap.h,
 * header-only) against a bit-by-bit model, over random maps and every
 * range shape: ranges inside one word, across words, at both ends.
 */
#include <criterion/criterion.h>
#include "../alloc/unitmap.h"

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t next_random(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static bool bit(const struct unitmap *m, unsigned u)
{
    return m->w[u / 64] >> (u % 64) & 1;
}

/* A map whose bits are set with density 1/4, 1/2, 3/4 or all/none. */
static struct unitmap random_map(unsigned shape)
{
    struct unitmap m;
    for (unsigned i = 0; i < UNITMAP_WORDS; i++) {
        uint64_t a = next_random(), b = next_random();
        m.w[i] = shape == 0 ? a & b : shape == 1 ? a : shape == 2 ? a | b
               : shape == 3 ? ~(uint64_t)0 : 0;
    }
    return m;
}

Test(unitmap, count_and_range_agree_with_the_bits_for_every_range_shape)
{
    for (unsigned round = 0; round < 200; round++) {
        struct unitmap m = random_map(round % 5);
        for (unsigned u = 0; u < UNITMAP_BITS; u += 1 + round % 7) {
            for (unsigned k = 1; u + k <= UNITMAP_BITS; k += 1 + (k > 70) * 13) {
                unsigned want = 0;
                for (unsigned i = u; i < u + k; i++)
                    want += bit(&m, i);
                cr_assert_eq(unitmap_count(&m, u, k), want, "round %u [%u, %u)", round, u, u + k);
                cr_assert_eq(unitmap_all(&m, u, k), want == k);
                struct unitmap r = unitmap_range(&m, u, k);
                for (unsigned i = 0; i < UNITMAP_BITS; i++)
                    cr_assert_eq(bit(&r, i), i >= u && i < u + k && bit(&m, i),
                                 "range [%u, %u) at unit %u", u, u + k, i);
            }
        }
    }
}

Test(unitmap, set_and_clear_touch_exactly_their_range)
{
    for (unsigned round = 0; round < 300; round++) {
        struct unitmap m = random_map(round % 5), before = m;
        unsigned u = (unsigned)(next_random() % UNITMAP_BITS);
        unsigned k = 1 + (unsigned)(next_random() % (UNITMAP_BITS - u));
        bool set = round & 1;
        if (set)
            unitmap_set(&m, u, k);
        else
            unitmap_clear(&m, u, k);
        for (unsigned i = 0; i < UNITMAP_BITS; i++)
            cr_assert_eq(bit(&m, i), i >= u && i < u + k ? set : bit(&before, i),
                         "round %u unit %u of [%u, %u)", round, i, u, u + k);
    }
}

Test(unitmap, runs_of_marks_where_k_set_bits_start)
{
    for (unsigned round = 0; round < 100; round++) {
        struct unitmap m = random_map(1 + round % 3);   /* dense: runs to find */
        unsigned k = 1 + round % 24;
        struct unitmap r = unitmap_runs_of(&m, k);
        for (unsigned u = 0; u < UNITMAP_BITS; u++) {
            bool want = u + k <= UNITMAP_BITS;
            for (unsigned i = u; want && i < u + k; i++)
                want = bit(&m, i);
            cr_assert_eq(bit(&r, u), want, "round %u k %u unit %u", round, k, u);
        }
    }
}

Test(unitmap, find_find_back_and_next_run_agree_with_the_bits)
{
    for (unsigned round = 0; round < 200; round++) {
        struct unitmap m = random_map(round % 5);
        if (round % 7 == 6) {           /* one set bit, or one clear bit, far from `from` */
            unsigned only = (unsigned)(next_random() % UNITMAP_BITS);
            m = random_map(round % 2 ? 3 : 4);
            m.w[only / 64] ^= (uint64_t)1 << (only % 64);
        }
        for (unsigned from = 0; from < UNITMAP_BITS; from++) {
            for (int set = 0; set < 2; set++) {
                unsigned want = from;
                while (want < UNITMAP_BITS && bit(&m, want) != (bool)set)
                    want++;
                cr_assert_eq(unitmap_find(&m, from, set), want, "round %u from %u set %d",
                             round, from, set);
                int back = (int)from;
                while (back >= 0 && bit(&m, (unsigned)back) != (bool)set)
                    back--;
                cr_assert_eq(unitmap_find_back(&m, from, set), back, "round %u from %u set %d",
                             round, from, set);
            }
        }
        cr_assert_eq(unitmap_find(&m, UNITMAP_BITS, true), UNITMAP_BITS);
        /* next_run walks the runs of set bits: together they are the set bits. */
        struct unitmap seen = { { 0 } };
        unsigned len, runs = 0;
        for (unsigned u = 0; unitmap_next_run(&m, &u, &len); u += len, runs++) {
            cr_assert_gt(len, 0);
            cr_assert(u == 0 || !bit(&m, u - 1), "a run starts after a clear bit");
            cr_assert(u + len == UNITMAP_BITS || !bit(&m, u + len), "and ends before one");
            unitmap_set(&seen, u, len);
        }
        for (unsigned i = 0; i < UNITMAP_WORDS; i++)
            cr_assert_eq(seen.w[i], m.w[i], "round %u word %u (%u runs)", round, i, runs);
    }
}
