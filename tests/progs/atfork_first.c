/*
 * atfork_first.c - fork handlers registered before tally's, as a library
 * constructor does when it runs before the first malloc. Such a prepare
 * handler runs after tally's (handlers run in reverse order of
 * registration), and its parent and child handlers before tally's, while
 * tally holds its locks. Each one allocates what takes a lock: a medium
 * block of a class it has not used yet (a new segment), and a large block
 * freed into the large cache. Prints "forked" when the fork returns.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void allocate(size_t medium)
{
    void *volatile m = malloc(medium);
    void *volatile l = malloc(1 << 20);
    memset(m, 1, 64);
    memset(l, 1, 64);
    free(l);
    free(m);
}

static void prepare(void) { allocate(100000); }
static void parent(void) { allocate(200000); }
static void child(void) { allocate(300000); }

/* Before every constructor, tally's included: before its first malloc. */
static void register_first(int argc, char **argv, char **envp)
{
    (void)argc, (void)argv, (void)envp;
    pthread_atfork(prepare, parent, child);
}
__attribute__((section(".preinit_array"), used))
static void (*const register_first_ptr)(int, char **, char **) = register_first;

int main(void)
{
    pid_t pid = fork();
    if (pid == 0)
        _exit(0);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return 1;
    printf("forked\n");
    return 0;
}
