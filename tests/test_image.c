/*
 * test_image.c - what loading tally costs a process: the code and tables
 * a plain run never uses lie in segments of their own (alloc/image.ld),
 * and a plain run leaves those off its pages; so does a program of small
 * blocks only with the code of span and large blocks. The helper program
 * (tests/progs/image_pages.c) allocates in every way a program does, or
 * in small blocks only, and counts the present pages of the library's
 * segments.
 */
#include "helpers.h"
#include <criterion/criterion.h>

struct pages {
    long cold, warm, eh, text;
    unsigned long long large;   /* span and large blocks live or cached */
};

static struct pages image_pages(const char *how)
{
    char out[512], cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_image_pages %s", tally_lib(), how);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    struct pages p;
    cr_assert_eq(sscanf(out, "cold=%ld warm=%ld eh=%ld text=%ld large=%llu", &p.cold, &p.warm,
                        &p.eh, &p.text, &p.large), 5, "%s", out);
    return p;
}

Test(image, a_plain_run_leaves_the_cold_code_and_unwind_tables_off_its_pages)
{
    struct pages p = image_pages("");
    cr_assert_gt(p.text, 0, "the resident code shows no page: the count is wrong");
    cr_assert_eq(p.cold, 0, "a plain run touched %ld page(s) of the cold code: a function "
                 "it runs is in a cold file or marked COLD_TEXT", p.cold);
    cr_assert_eq(p.eh, 0, "a plain run touched %ld page(s) of the unwind tables' segment",
                 p.eh);
    cr_assert_gt(p.warm, 0, "span and large blocks ran, yet no page of their code is present");
}

Test(image, small_blocks_only_leave_the_code_of_span_and_large_blocks_off_their_pages)
{
    struct pages p = image_pages("small");
    /* UBSan's runtime, in the library of `make test-ubsan`, makes an
     * 80 KiB block of its own at start-up: no program of small blocks. */
    if (p.large)
        cr_skip_test("something else in the process made span or large blocks");
    cr_assert_gt(p.text, 0, "the resident code shows no page: the count is wrong");
    cr_assert_eq(p.warm, 0, "a program of small blocks touched %ld page(s) of the span and "
                 "large blocks' code: a function it runs there needs HOT_TEXT", p.warm);
    cr_assert_eq(p.cold, 0, "%ld page(s) of the cold code", p.cold);
}

/* The control: the same count sees the cold code once it has run. */
Test(image, the_count_sees_the_cold_code_once_it_runs)
{
    struct pages p = image_pages("touch");
    cr_assert_gt(p.cold, 0, "tally_stats_print ran, yet no page of the cold code is present");
}
