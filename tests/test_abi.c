/*
 * test_abi.c - the exported symbols are exactly the committed list
 * (tests/abi/symbols.txt): adding one is a deliberate act, removing one
 * breaks callers. Plus the instrumentation reports and the runner.
 */
#include "helpers.h"
#include <criterion/criterion.h>
#include "tally.h"

Test(abi, exported_symbols_match_the_committed_list)
{
    char cmd[1024], out[8192], expected[8192];
    snprintf(cmd, sizeof cmd, "nm -D --defined-only %s | awk '{print $3}' | sort", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    const char *src = getenv("TALLY_SRC");
    snprintf(cmd, sizeof cmd, "cat %s/tests/abi/symbols.txt", src ? src : "../..");
    cr_assert_eq(run_cmd(cmd, expected, sizeof expected), 0);
    cr_assert_str_eq(out, expected, "exported symbols changed; update tests/abi/symbols.txt "
                     "deliberately if this is intended");
}

Test(abi, stats_print_text_and_json)
{
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    void *keep = malloc(5000);
    cr_assert_eq(tally_stats_print(fds[1], TALLY_STATS_JSON), 0);
    cr_assert_eq(tally_stats_print(fds[1], TALLY_STATS_TEXT), 0);
    cr_assert_eq(tally_stats_print(fds[1], 7), -1);
    close(fds[1]);
    char buf[16384];
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    cr_assert_gt(n, 0);
    buf[n] = '\0';
    cr_assert_eq(buf[0], '{', "%s", buf);
    cr_assert(strstr(buf, "\"allocated_bytes\": "), "%s", buf);
    const char *row = strstr(buf, "{\"size\": 5120, \"blocks\": ");
    cr_assert(row, "%s", buf);
    /* The slots of the class's 64 KiB pages: at least the blocks in use,
     * at most 12 a page (65536 / 5120; the segment's first page holds
     * fewer, after the header). */
    unsigned long blocks, pages, slots;
    cr_assert_eq(sscanf(row, "{\"size\": 5120, \"blocks\": %lu, \"pages\": %lu, \"slots\": %lu",
                        &blocks, &pages, &slots), 3, "%s", row);
    cr_assert_geq(blocks, 1);
    cr_assert_geq(pages, 1);
    cr_assert_geq(slots, blocks, "%s", row);
    cr_assert_leq(slots, 12 * pages, "%s", row);
    cr_assert(strstr(buf, "  class       blocks in use    pages    slots    fill\n"), "%s", buf);
    cr_assert(strstr(buf, "]}\ntally: statistics\n"), "%s", buf);
    cr_assert(strstr(buf, "  resident_bytes    "), "%s", buf);
    free(keep);
}

Test(abi, runner_preloads_and_reports)
{
    char out[8192];
    cr_assert_eq(run_cmd("../tally run -- ./prog_plain 2>&1", out, sizeof out), 0);
    cr_assert(strstr(out, "tally 0.1.0 allocated=yes"), "%s", out);
    cr_assert(strstr(out, "tally: statistics"), "%s", out);
    cr_assert_eq(run_cmd("../tally run --debug -- ./prog_overflow 2>&1", out, sizeof out),
                 128 + SIGABRT);
    cr_assert(strstr(out, "heap buffer overflow"), "%s", out);
    cr_assert_eq(run_cmd("../tally run --timing --report=timing.txt -- ./prog_plain && "
                         "cat timing.txt && rm timing.txt", out, sizeof out), 0);
    cr_assert(strstr(out, "tally: timing report"), "%s", out);
    /* A library path the loader would split: refused, where the program
     * used to run on the system malloc, silently. */
    cr_assert_eq(run_cmd("d=$(mktemp -d '/tmp/tally run XXXXXX') && cp ../tally ../libtally.so \"$d/\" "
                         "&& \"$d/tally\" run -- ./prog_plain 2>&1; rc=$?; rm -rf \"$d\"; exit $rc",
                         out, sizeof out), 1);
    cr_assert(strstr(out, "tally: cannot preload"), "%s", out);
}

/* TALLY_OPTIONS splits at commas: a --report path with one went to the
 * file named by its first part (and the rest was read as options, here
 * "b", with a warning). The runner refuses it, as it does a library path
 * the loader would split. */
Test(abi, runner_refuses_a_report_path_with_a_comma)
{
    char out[8192];
    int rc = run_cmd("d=$(mktemp -d /tmp/tally-comma-XXXXXX) && "
                     "../tally run --report=\"$d/a,b\" -- ./prog_plain 2>&1; rc=$?; "
                     "ls \"$d\"; rm -rf \"$d\"; exit $rc", out, sizeof out);
    cr_assert_neq(rc, 0, "ran anyway: %s", out);
    cr_assert(strstr(out, "tally: cannot write the report to"), "%s", out);
    cr_assert(!strstr(out, "allocated=yes"), "the program ran: %s", out);
}
