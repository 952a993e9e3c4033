/*
 * diag.c - formatting into fixed buffers and the one place tally aborts.
 */
#define _GNU_SOURCE
#include "diag.h"

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

void diag_str(struct diag_buf *b, const char *s)
{
    while (*s && b->len < sizeof b->text - 1)
        b->text[b->len++] = *s++;
}

void diag_hex(struct diag_buf *b, uintptr_t v)
{
    char tmp[2 + 16];
    int n = 0;
    do {
        tmp[n++] = "0123456789abcdef"[v & 15];
        v >>= 4;
    } while (v);
    diag_str(b, "0x");
    while (n && b->len < sizeof b->text - 1)
        b->text[b->len++] = tmp[--n];
}

void diag_dec(struct diag_buf *b, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n && b->len < sizeof b->text - 1)
        b->text[b->len++] = tmp[--n];
}

void diag_flush(struct diag_buf *b, int fd)
{
    int saved = errno;
    size_t off = 0;
    while (off < b->len) {
        ssize_t w = write(fd, b->text + off, b->len - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    b->len = 0;
    errno = saved;
}

void diag_headline(struct diag_buf *b, const char *func, const char *what, const void *p)
{
    diag_str(b, "tally: ");
    diag_str(b, func);
    diag_str(b, "(): ");
    diag_str(b, what);
    diag_str(b, ": pointer ");
    diag_hex(b, (uintptr_t)p);
}

void diag_fail(const char *func, const char *what, const void *p)
{
    struct diag_buf b = { .len = 0 };
    diag_headline(&b, func, what, p);
    diag_str(&b, " (");
    diag_str(&b, program_invocation_short_name);
    diag_str(&b, ", pid ");
    diag_dec(&b, (uint64_t)getpid());
    diag_str(&b, ")\n");
    diag_flush(&b, STDERR_FILENO);
    abort();
}

void diag_warn(const char *what, const char *detail)
{
    struct diag_buf b = { .len = 0 };
    diag_str(&b, "tally: warning: ");
    diag_str(&b, what);
    diag_str(&b, detail);
    diag_str(&b, "\n");
    diag_flush(&b, STDERR_FILENO);
}
