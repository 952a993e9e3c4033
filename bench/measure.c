/*
 * measure.c - run one workload program and report its wall time, rusage
 * and peak RSS; the runner (bench/harness/execute.py) starts every run
 * through it.
 *
 * usage: measure RESULT_FILE [-p PRELOAD_SO] PROGRAM [ARGS...]
 *
 * Writes one line to RESULT_FILE:
 *   status <raw wait status> wall_s <s> user_s <s> sys_s <s>
 *   maxrss_kib <KiB> hwm_kib <KiB> peak_kib <KiB>
 *
 * Why not let Python wait for the program itself: Linux carries a process's
 * peak RSS (ru_maxrss) across exec, so a program forked from the Python
 * runner would report at least the ~20 MiB the interpreter had resident
 * when it forked. Forked from this small program instead, the baseline is
 * about a megabyte, as under GNU time(1). For the same reason the
 * allocator is preloaded (-p) into the program only, not into this one.
 *
 * Why hwm_kib: since Linux 6.2 a process's RSS is counted in per-CPU
 * counters, and ru_maxrss reads their approximate sum, which leaves out
 * what each CPU has not yet folded into the total: up to 31 pages per CPU
 * for anonymous memory and as many for file pages. A program that faults
 * 20 anonymous pages on one CPU reports none of them (docs/benchmarks.md,
 * "How a run is measured"). On the smallest workloads (1.5 MiB) that is
 * up to 15% of the figure, and it falls unevenly: it depends on how many
 * pages each allocator touched, modulo 32. So the program runs traced,
 * and when it exits (PTRACE_EVENT_EXIT: its memory still mapped) this
 * reads VmHWM from /proc, which adds the counters exactly. peak_kib is
 * the larger of the two: VmHWM's earlier high-water marks come from the
 * same approximate sums, and ru_maxrss also covers the program's own
 * children (a compiler driver's), which VmHWM does not. Where tracing is
 * refused (a container without ptrace) hwm_kib is -1 and peak_kib is
 * ru_maxrss. The exit stop's time in this process (reading /proc) is
 * taken out of wall_s; what is left of it, the two wake-ups, is about
 * 0.1-0.3 ms a run, the same for every allocator.
 */
#include "bench_util.h"     /* first: it sets _GNU_SOURCE */
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

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

/* VmHWM of a live (stopped) process in KiB, or -1. */
static long hwm_kib(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    return bu_proc_kib(path, "VmHWM");
}

/* Waits for the child to end, following it through its ptrace stops: the
 * exit stop (read VmHWM) and signals, which go on to the child as they
 * came. The time spent in the exit stop goes to *paused. */
static int wait_traced(pid_t pid, int *status, struct rusage *ru, long *hwm,
                       double *paused)
{
    for (;;) {
        if (wait4(pid, status, 0, ru) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (!WIFSTOPPED(*status))
            return 0;
        double t0 = now_s();
        int sig = WSTOPSIG(*status);
        if (*status >> 8 == (SIGTRAP | (PTRACE_EVENT_EXIT << 8))) {
            *hwm = hwm_kib(pid);
            sig = 0;
        } else if (*status >> 16 == PTRACE_EVENT_STOP) {
            sig = 0;                    /* a group stop: go on */
        }
        ptrace(PTRACE_CONT, pid, 0, (void *)(long)sig);
        *paused += now_s() - t0;
    }
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
    /* The child waits on `go` until it is traced: seized rather than
     * asking to be traced itself, it gets no stop at exec, only the exit
     * stop, so the run pays for one round trip to this process. */
    int go[2];
    if (pipe(go) < 0) {
        perror("pipe");
        return 71;
    }
    double start = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 71;
    }
    if (pid == 0) {
        char c;
        fclose(result);
        close(go[1]);
        while (read(go[0], &c, 1) < 0 && errno == EINTR)
            ;
        close(go[0]);
        if (preload)
            setenv("LD_PRELOAD", preload, 1);
        else
            unsetenv("LD_PRELOAD");
        execv(argv[first], argv + first);
        fprintf(stderr, "measure: cannot run %s: %s\n", argv[first], strerror(errno));
        _exit(127);
    }
    close(go[0]);
    /* Refused (a container without ptrace): the program runs untraced. */
    ptrace(PTRACE_SEIZE, pid, 0, (void *)(long)(PTRACE_O_TRACEEXIT | PTRACE_O_EXITKILL));
    close(go[1]);
    int status;
    struct rusage ru;
    long hwm = -1;
    double paused = 0;
    if (wait_traced(pid, &status, &ru, &hwm, &paused) < 0) {
        perror("wait4");
        return 71;
    }
    double wall = now_s() - start - paused;
    long peak = hwm > ru.ru_maxrss ? hwm : ru.ru_maxrss;
    fprintf(result, "status %d wall_s %.6f user_s %.6f sys_s %.6f maxrss_kib %ld "
            "hwm_kib %ld peak_kib %ld\n",
            status, wall, tv_s(ru.ru_utime), tv_s(ru.ru_stime), ru.ru_maxrss, hwm, peak);
    if (fclose(result) != 0)
        return 70;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
