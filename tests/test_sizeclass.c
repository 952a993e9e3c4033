/*
 * test_sizeclass.c - the class tables against first principles. Compiled
 * with alloc/sizeclass.c itself (its tables are hidden inside libtally).
 */
#include <criterion/criterion.h>
#include "../alloc/sizeclass.h"

Test(sizeclass, every_size_gets_the_smallest_class_that_fits)
{
    for (size_t n = 0; n <= MEDIUM_MAX; n++) {
        unsigned c = sizeclass_of(n);
        cr_assert_lt(c, NUM_CLASSES);
        cr_assert_geq(sizeclass_block_size[c], n, "size %zu class %u", n, c);
        if (c > 0)
            cr_assert_lt(sizeclass_block_size[c - 1], n ? n : 1, "size %zu not in smallest class", n);
    }
    cr_assert_eq(sizeclass_block_size[NUM_SMALL_CLASSES - 1], SMALL_MAX);
    cr_assert_eq(sizeclass_block_size[NUM_CLASSES - 1], MEDIUM_MAX);
}

Test(sizeclass, the_medium_lane_table_agrees_with_the_formula)
{
    for (size_t n = SMALL_MAX + 1; n <= MEDIUM_MAX; n++)
        cr_assert_eq(sizeclass_medium_by_kib[(n - 1) >> 10], sizeclass_of(n), "size %zu", n);
}

Test(sizeclass, reciprocal_division_is_exact_inside_a_segment)
{
    for (unsigned c = 0; c < NUM_CLASSES; c++) {
        uint32_t bs = sizeclass_block_size[c];
        /* Every offset near every block boundary, and a dense sweep. */
        for (uint32_t k = 0; (uint64_t)k * bs < (1u << 22); k++) {
            for (int d = -2; d <= 2; d++) {
                int64_t off = (int64_t)k * bs + d;
                if (off < 0 || off >= (1 << 22))
                    continue;
                cr_assert_eq(sizeclass_div((uint32_t)off, c), (uint32_t)off / bs,
                             "class %u off %lld", c, (long long)off);
            }
        }
        for (uint32_t off = 0; off < (1u << 22); off += 97)
            cr_assert_eq(sizeclass_div(off, c), off / bs, "class %u off %u", c, off);
    }
}

Test(sizeclass, a_class_wastes_at_most_a_quarter_of_a_request)
{
    /* 16-byte granularity up to 128 B, then at most 25% over the request. */
    for (size_t n = 1; n <= MEDIUM_MAX; n++) {
        size_t u = sizeclass_block_size[sizeclass_of(n)];
        if (n <= 128)
            cr_assert_lt(u - n, 16, "size %zu block %zu", n, u);
        else
            cr_assert_leq((double)(u - n), 0.25 * (double)n, "size %zu block %zu", n, u);
    }
}
