/*
 * test_linking.c - the ways users get tally: LD_PRELOAD into an unmodified
 * program, and a program linked against libtally.a; plus TALLY_OPTIONS
 * warnings. The helper programs are built next to this runner.
 */
#include "helpers.h"
#include <criterion/criterion.h>

Test(linking, ld_preload_replaces_malloc)
{
    char out[512];
    cr_assert_eq(run_cmd("./prog_plain", out, sizeof out), 0);
    cr_assert_str_eq(out, "system\n", "without the preload the system malloc runs");
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_plain", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert_str_eq(out, "tally 0.1.0 allocated=yes\n");
}

/* A library's constructor runs before a preloaded tally's: its free(NULL)
 * meets tally before start-up mapped the segment map. */
Test(linking, a_free_before_tallys_constructor_runs)
{
    char out[512], cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_early_free", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, "early ok\nmain\n");
}

Test(linking, cxx_new_and_delete_go_through_tally)
{
    char out[512], cmd[1024];
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_cxx", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert_str_eq(out, "tally new/delete yes\n");
}

Test(linking, static_library_replaces_malloc)
{
    char out[512];
    cr_assert_eq(run_cmd("./prog_static", out, sizeof out), 0);
    cr_assert_str_eq(out, "tally 0.1.0 allocated=yes\n");
}

Test(linking, unknown_option_warns_once_and_runs)
{
    char out[1024];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "TALLY_OPTIONS=purge_delay=5,bogus=1,mmap_threshold=lots "
             "LD_PRELOAD=%s ./prog_plain 2>&1", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert(strstr(out, "tally: warning: TALLY_OPTIONS: unknown option ignored: bogus=1\n"),
              "%s", out);
    cr_assert(strstr(out, "bad value ignored: mmap_threshold=lots"), "%s", out);
    char *first = strstr(out, "bogus");
    cr_assert_null(strstr(first + 1, "bogus"), "warned twice: %s", out);
    cr_assert(strstr(out, "tally 0.1.0 allocated=yes"), "%s", out);
}

Test(linking, options_reach_the_allocator)
{
    char out[512];
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "TALLY_OPTIONS=mmap_threshold=64k LD_PRELOAD=%s "
             "python3 -c \"import ctypes; v=ctypes.c_uint64(); "
             "ctypes.CDLL(None).tally_option_get(b'mmap_threshold', ctypes.byref(v)); "
             "print(v.value)\"", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert_str_eq(out, "65536\n");
}

Test(linking, memcheck_sees_tally_blocks, .timeout = 120)
{
    char out[8192], cmd[1024];
    if (run_cmd("command -v valgrind", out, sizeof out) != 0)
        cr_skip_test("valgrind is not installed");
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s valgrind --soname-synonyms=somalloc=nouserintercept "
             "--error-exitcode=9 ./prog_memcheck 2>&1", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 9, "%s", out);
    cr_assert(strstr(out, "Invalid write of size 1"), "%s", out);
    cr_assert(strstr(out, "hooks_free"), "the free went through tally: %s", out);
}

/* Under memcheck realloc is always allocate-copy-free; a shrink whose new
 * block was refused returned NULL with ENOMEM there before, where tally
 * otherwise never fails a shrink (oom::a_shrinking_realloc_never_fails). */
Test(linking, a_shrink_under_memcheck_never_fails, .timeout = 120)
{
    char out[8192], cmd[1024];
    if (run_cmd("command -v valgrind", out, sizeof out) != 0)
        cr_skip_test("valgrind is not installed");
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s ./prog_shrink_refused", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "plain: %s", out);
    snprintf(cmd, sizeof cmd, "LD_PRELOAD=%s valgrind -q --soname-synonyms=somalloc=nouserintercept "
             "--error-exitcode=9 ./prog_shrink_refused 2>&1", tally_lib());
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert_str_eq(out, "done\n");
}

/* A set-user-ID program ignores TALLY_OPTIONS, as glibc ignores its
 * MALLOC_ variables there: otherwise whoever runs it could have it create
 * and append to any file as its owner (`report=`). Needs root to make the
 * set-user-ID copy of the statically linked program; skipped otherwise. */
Test(linking, a_set_user_id_program_ignores_tally_options)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to make a set-user-ID program");
    char dir[] = "/tmp/tally-suid-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char cmd[1024], out[512], report[512];
    snprintf(report, sizeof report, "%s/report", dir);
    snprintf(cmd, sizeof cmd, "chmod 755 %s && cp ./prog_static %s/prog && chmod 4755 %s/prog",
             dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    /* Control: run by its owner, the options apply and the report is written. */
    snprintf(cmd, sizeof cmd, "TALLY_OPTIONS=stats=1,report=%s %s/prog", report, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
    cr_assert_eq(access(report, F_OK), 0, "the owner's run wrote no report");
    unlink(report);
    /* Run by another user, it must not write the file. */
    snprintf(cmd, sizeof cmd, "setpriv --reuid=65534 --regid=65534 --clear-groups "
             "env TALLY_OPTIONS=stats=1,report=%s %s/prog", report, dir);
    int rc = run_cmd(cmd, out, sizeof out);
    bool wrote = access(report, F_OK) == 0;
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    run_cmd(cmd, report, sizeof report);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert_str_eq(out, "tally 0.1.0 allocated=yes\n");
    cr_assert(!wrote, "an unprivileged caller had the set-user-ID program write a file");
}
