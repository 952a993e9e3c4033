/*
 * measure.c - run one workload program and report its wall time and
 * rusage; the runner (bench/harness/execute.py) starts every run through it.
 *
 * usage: measure RESULT_FILE [-p PRELOAD_SO] PROGRAM [ARGS...]
 *
 * Writes one line to RESULT_FILE:
 *   status <raw wait status> wall_s <s> user_s <s> sys_s <s> maxrss_kib <KiB>
 *
 * Why not let Python wait for the program itself: Linux carries a process's
 * peak RSS (ru_maxrss) across exec, so a program forked from the Python
 * runner would report at least the ~20 MiB the interpreter had resident
 * when it forked. Forked from this small program instead, the baseline is
 * about a megabyte, as under GNU time(1). For the same reason the
 * allocator is preloaded (-p) into the program only, not into this one.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

int main(int argc, char **argv)
{
    const char *preload = NULL;
    int first = 2;
    if (argc > 3 && strcmp(argv[2], "-p") == 0) {
        preload = argv[3];
        first = 4;
    }
    if (argc <= first) {
        fprintf(stderr, "usage: %s RESULT_FILE [-p PRELOAD_SO] PROGRAM [ARGS...]\n",
                argv[0]);
        return 64;
    }
    FILE *result = fopen(argv[1], "w");
    if (result == NULL) {
        perror(argv[1]);
        return 70;
    }
    double start = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 71;
    }
    if (pid == 0) {
        fclose(result);
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execv(argv[first], argv + first);
        fprintf(stderr, "measure: cannot run %s: %s\n", argv[first], strerror(errno));
        _exit(127);
    }
    int status;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0)
        if (errno != EINTR) {
            perror("wait4");
            return 71;
        }
    double wall = now_s() - start;
    fprintf(result, "status %d wall_s %.6f user_s %.6f sys_s %.6f maxrss_kib %ld\n",
            status, wall, tv_s(ru.ru_utime), tv_s(ru.ru_stime), ru.ru_maxrss);
    if (fclose(result) != 0)
        return 70;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
