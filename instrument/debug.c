/*
 * debug.c - catching heap misuse at run time.
 *
 * A debug block is laid out as
 *     [struct debug_hdr ... fence(16)] [user data: size bytes] [fence(16)]
 * inside one allocator block. The header sits right before the user data,
 * so free(p) finds it by subtraction, and carries a check word derived from
 * its own address, so a pointer that is not a debug block's start (or a
 * header trampled by an underflow) is recognised rather than trusted.
 *
 * Freed blocks are poisoned and parked in a FIFO quarantine (bounded by the
 * `quarantine` option, in bytes); a block's poison is verified when it
 * leaves the quarantine for reuse, and by tally_check(). All list updates
 * happen under debug_lock; filling and checking bytes happens outside it.
 */
#define _GNU_SOURCE
#include "debug.h"
#include "options.h"
#include "report.h"
#include "../alloc/raw.h"
#include "../alloc/segment.h"
#include "../alloc/os.h"
#include "../alloc/lock.h"
#include "../include/tally.h"

#include <execinfo.h>
#include <stddef.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define FENCE_BYTE  0xFD   /* around every block */
#define JUNK_BYTE   0xA5   /* fresh memory (not calloc) */
#define POISON_BYTE 0x5A   /* freed memory in quarantine */
#define FENCE_SIZE  16
#define STACK_MAX   16

enum { BLOCK_LIVE = 0x4c495645, BLOCK_FREED = 0x46524545 };

struct debug_hdr {
    struct debug_hdr *next, *prev;   /* live list, or quarantine FIFO */
    size_t size;                     /* as requested */
    uint64_t check;
    uint32_t state;
    uint16_t depth;                  /* frames in stack[] */
    uint16_t reserved0;
    uint64_t reserved1;              /* keeps fence[] last in a 16-byte multiple */
    const void *site;                /* caller of malloc */
    const void *free_site;           /* caller of free, once freed */
    const void *stack[STACK_MAX];
    uint8_t fence[FENCE_SIZE];       /* directly before the user data */
} __attribute__((aligned(16)));

_Static_assert(sizeof(struct debug_hdr) % 16 == 0, "user data stays 16-byte aligned");
_Static_assert(offsetof(struct debug_hdr, fence) + FENCE_SIZE == sizeof(struct debug_hdr),
               "the front fence touches the user data");

static pthread_mutex_t debug_lock = PTHREAD_MUTEX_INITIALIZER;
static struct debug_hdr live = { .next = &live, .prev = &live };
static struct debug_hdr quarantine = { .next = &quarantine, .prev = &quarantine };
static size_t quarantine_bytes;
static bool used;
/* Set while this thread runs tally_check(), which reports every problem
 * and aborts on none; other threads' reports abort as `abort` says. */
static __thread bool tls_checking TLS_IE;

HOT_TEXT void debug_fork_prepare(void) { pthread_mutex_lock(&debug_lock); }
HOT_TEXT void debug_fork_parent(void) { pthread_mutex_unlock(&debug_lock); }
HOT_TEXT void debug_fork_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    debug_lock = fresh;
}

void debug_enable(void) { __atomic_store_n(&used, true, __ATOMIC_RELAXED); }

HOT_TEXT bool debug_was_used(void) { return __atomic_load_n(&used, __ATOMIC_RELAXED); }

size_t debug_live_blocks(void)
{
    size_t n = 0;
    lock_take(&debug_lock);
    for (struct debug_hdr *h = live.next; h != &live; h = h->next)
        n++;
    lock_give(&debug_lock);
    return n;
}

static uint64_t hdr_check(const struct debug_hdr *h)
{
    /* The free-list secret, set before any thread can allocate: a debug
     * block made the instant debug=1 appears is checked like any other. */
    uint64_t x = (uintptr_t)h ^ block_secret ^ 0x7a11dbe6ULL ^ ((uint64_t)h->state << 32) ^ h->size;
    return x * 0xff51afd7ed558ccdULL;
}

static void *user_of(struct debug_hdr *h) { return h + 1; }

/* ---- lists (debug_lock held) ----------------------------------------- */

static void list_push(struct debug_hdr *head, struct debug_hdr *h)
{
    h->prev = head->prev;
    h->next = head;
    head->prev->next = h;
    head->prev = h;
}

static void list_remove(struct debug_hdr *h)
{
    h->prev->next = h->next;
    h->next->prev = h->prev;
    h->next = h->prev = NULL;
}

/* ---- reports ---------------------------------------------------------- */

static void report_block(struct diag_buf *b, int fd, const struct debug_hdr *h)
{
    diag_str(b, "  block ");
    diag_hex(b, (uintptr_t)(h + 1));
    diag_str(b, ", size ");
    diag_dec(b, h->size);
    diag_str(b, "\n  allocated at ");
    report_symbol(b, h->site);
    for (unsigned i = 1; i < h->depth; i++) {
        diag_str(b, "\n               ");
        report_symbol(b, h->stack[i]);
        report_maybe_flush(b, fd);
    }
    if (h->state == BLOCK_FREED) {
        diag_str(b, "\n  freed at ");
        report_symbol(b, h->free_site);
    }
    diag_str(b, "\n");
}

/* Prints "tally: FUNC(): WHAT" with the block's story and the current
 * call site, then aborts unless abort=0. */
static void debug_error(const char *func, const char *what, const void *ptr,
                        const struct debug_hdr *h, const void *site)
{
    int fd = report_open();
    struct diag_buf b = { .len = 0 };
    diag_headline(&b, func, what, ptr);
    diag_str(&b, "\n");
    if (h)
        report_block(&b, fd, h);
    if (site) {
        diag_str(&b, "  detected at ");
        report_symbol(&b, site);
        diag_str(&b, "\n");
    }
    diag_flush(&b, fd);
    report_close(fd);
    if (option(OPT_ABORT) && !tls_checking)
        abort();
}

/* ---- checks ------------------------------------------------------------ */

static size_t first_not(const uint8_t *p, size_t n, uint8_t byte)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != byte)
            return i;
    return n;
}

/* Checks both fences; reports and returns false when one was written. */
static bool fences_ok(struct debug_hdr *h, const char *func, const void *site)
{
    const uint8_t *tail = (const uint8_t *)user_of(h) + h->size;
    if (first_not(h->fence, FENCE_SIZE, FENCE_BYTE) != FENCE_SIZE) {
        debug_error(func, "heap buffer underflow (bytes before the block were written)",
                    user_of(h), h, site);
        return false;
    }
    size_t k = first_not(tail, FENCE_SIZE, FENCE_BYTE);
    if (k != FENCE_SIZE) {
        struct diag_buf b = { .len = 0 };
        diag_str(&b, "heap buffer overflow (written past the end, at offset +");
        diag_dec(&b, h->size + k);
        diag_str(&b, ")");
        b.text[b.len] = '\0';
        debug_error(func, b.text, user_of(h), h, site);
        return false;
    }
    return true;
}

static bool poison_ok(struct debug_hdr *h, const char *func)
{
    size_t k = first_not(user_of(h), h->size, POISON_BYTE);
    if (k == h->size)
        return true;
    struct diag_buf b = { .len = 0 };
    diag_str(&b, "use after free (freed block written at offset ");
    diag_dec(&b, k);
    diag_str(&b, ")");
    b.text[b.len] = '\0';
    debug_error(func, b.text, user_of(h), h, NULL);
    return false;
}

/* The header of the debug block whose user data starts at p, or NULL after
 * reporting an invalid pointer. */
static struct debug_hdr *header_peek(void *p)
{
    uint8_t *block = raw_debug_block_of(p);
    /* No block: a large one (raw_is_debug checked its start), or a pointer
     * into the debug heap outside every block (its segment's header, a page
     * no class holds). Not the first taken for the second: the header read
     * below, in front of a pointer near a segment's start, lay in the
     * mapping before it, unmapped (SIGSEGV instead of a report). */
    bool is_large = !block && segmap_tag_checked(p) >= TAG_LARGE_TAIL;
    if (!block && !is_large)
        return NULL;
    struct debug_hdr *h = (struct debug_hdr *)p - 1;
    if ((!is_large && (uint8_t *)h < block) || ((uintptr_t)p & 15) || h->check != hdr_check(h))
        return NULL;
    return h;
}

static struct debug_hdr *header_of(void *p, const char *func, const void *site)
{
    struct debug_hdr *h = header_peek(p);
    if (!h)
        debug_error(func, "invalid pointer (not the start of a debug block, or its header "
                    "was overwritten)", p, NULL, site);
    return h;
}

/* ---- allocation ---------------------------------------------------------- */

void *debug_alloc(size_t size, size_t align, bool zero, const void *site)
{
    if (size > PTRDIFF_MAX - sizeof(struct debug_hdr) - FENCE_SIZE)
        return NULL;
    void *p = raw_alloc_debug(size + FENCE_SIZE, align, sizeof(struct debug_hdr));
    if (!p)
        return NULL;
    struct debug_hdr *h = (struct debug_hdr *)p - 1;
    os_mark_defined(h, sizeof *h);
    memset(h, 0, sizeof *h);
    h->size = size;
    h->state = BLOCK_LIVE;
    h->site = site;
    unsigned depth = (unsigned)option(OPT_BACKTRACE);
    if (depth) {
        void *frames[STACK_MAX + 3];
        int n = backtrace(frames, (int)depth + 3);
        /* Skip debug_alloc, hooks_alloc and the entry point. */
        for (int i = 3; i < n && h->depth < STACK_MAX; i++)
            h->stack[h->depth++] = frames[i];
        if (h->depth)
            h->site = h->stack[0];
    }
    h->check = hdr_check(h);
    memset(h->fence, FENCE_BYTE, FENCE_SIZE);
    memset((uint8_t *)p + size, FENCE_BYTE, FENCE_SIZE);
    memset(p, zero ? 0 : JUNK_BYTE, size);
    lock_take(&debug_lock);
    list_push(&live, h);
    lock_give(&debug_lock);
    return p;
}

/* Takes blocks out of quarantine, oldest first, until it fits its budget
 * (debug_lock held); returns the list of evicted headers. Never `keep`,
 * the block just freed: a block larger than the budget went straight
 * back, the next request of its size got the same address with a valid
 * header, and a second free of the old pointer freed the new block
 * without a report. */
static struct debug_hdr *quarantine_trim(size_t limit, const struct debug_hdr *keep)
{
    struct debug_hdr *evicted = NULL;
    while (quarantine_bytes > limit && quarantine.next != &quarantine &&
           quarantine.next != keep) {
        struct debug_hdr *h = quarantine.next;
        list_remove(h);
        quarantine_bytes -= h->size;
        h->next = evicted;
        evicted = h;
    }
    return evicted;
}

void debug_free(void *p, const void *site)
{
    struct debug_hdr *h = header_of(p, "free", site);
    if (!h)
        return;
    if (h->state == BLOCK_FREED) {
        debug_error("free", "double free", p, h, site);
        return;
    }
    fences_ok(h, "free", site);
    lock_take(&debug_lock);
    list_remove(h);
    lock_give(&debug_lock);
    h->state = BLOCK_FREED;
    h->free_site = site;
    h->check = hdr_check(h);
    memset(p, POISON_BYTE, h->size);

    lock_take(&debug_lock);
    list_push(&quarantine, h);
    quarantine_bytes += h->size;
    struct debug_hdr *evicted = quarantine_trim(option(OPT_QUARANTINE), h);
    lock_give(&debug_lock);
    while (evicted) {
        struct debug_hdr *next = evicted->next;
        poison_ok(evicted, "free");
        evicted->check = 0;
        raw_free_debug(user_of(evicted));
        evicted = next;
    }
}

size_t debug_usable_size(void *p)
{
    struct debug_hdr *h = header_of(p, "malloc_usable_size", NULL);
    if (h && h->state == BLOCK_FREED) {
        debug_error("malloc_usable_size", "use after free (size of a freed block)", p, h, NULL);
        return 0;
    }
    return h ? h->size : 0;
}

size_t debug_live_size(void *p)
{
    struct debug_hdr *h = header_peek(p);
    return h && h->state == BLOCK_LIVE ? h->size : 0;
}

/* A shrink when no new block can be had: the debug block keeps its place,
 * with the rear fence moved up to the new size. Under the lock, since
 * tally_check reads the size and the fence together. */
static void *debug_shrink_in_place(void *p, size_t size)
{
    struct debug_hdr *h = (struct debug_hdr *)p - 1;
    lock_take(&debug_lock);
    h->size = size;
    h->check = hdr_check(h);
    memset((uint8_t *)p + size, FENCE_BYTE, FENCE_SIZE);
    lock_give(&debug_lock);
    return p;
}

void *debug_realloc(void *p, size_t size, const void *site)
{
    size_t old_size;
    bool was_debug = raw_is_debug(p);
    if (was_debug) {
        struct debug_hdr *h = header_of(p, "realloc", site);
        if (!h)
            return NULL;
        if (h->state == BLOCK_FREED) {
            debug_error("realloc", "use after free (realloc of a freed block)", p, h, site);
            return NULL;
        }
        if (!fences_ok(h, "realloc", site))
            return NULL;
        old_size = h->size;
    } else {
        old_size = raw_usable_size(p, "realloc");
    }
    void *q = debug_alloc(size, MIN_ALIGN, false, site);
    /* A shrink never fails, as in plain mode (raw_realloc): code counts on
     * it, and debug mode must not turn `p = realloc(p, smaller)` into a
     * crash when memory runs out. */
    if (!q && size <= old_size)
        return was_debug ? debug_shrink_in_place(p, size) : raw_realloc(p, size, "realloc");
    if (!q)
        return NULL;
    memcpy(q, p, old_size < size ? old_size : size);
    if (was_debug)
        debug_free(p, site);
    else
        raw_free(p, "realloc");
    return q;
}

/* ---- on demand: tally_check, tally_report_leaks ------------------------ */

__attribute__((visibility("default"))) size_t tally_check(void)
{
    size_t problems = 0;
    lock_take(&debug_lock);
    /* Report everything found in one pass; the caller decides what to do.
     * Not by clearing the `abort` option: another thread's double free
     * found meanwhile carried on, and a change to it made meanwhile was
     * overwritten. */
    tls_checking = true;
    for (struct debug_hdr *h = live.next; h != &live; h = h->next)
        problems += !fences_ok(h, "tally_check", NULL);
    for (struct debug_hdr *h = quarantine.next; h != &quarantine; h = h->next)
        problems += !poison_ok(h, "tally_check");
    tls_checking = false;
    lock_give(&debug_lock);
    return problems;
}

#define LEAK_SITES 1024
struct leak_site { const void *site; const struct debug_hdr *example; uint64_t count, bytes; };

__attribute__((visibility("default"))) size_t tally_report_leaks(void)
{
    static TABLE_BSS struct leak_site sites[LEAK_SITES];     /* under debug_lock */
    size_t blocks = 0, bytes = 0, nsites = 0;
    lock_take(&debug_lock);
    memset(sites, 0, sizeof sites);
    for (struct debug_hdr *h = live.next; h != &live; h = h->next) {
        blocks++;
        bytes += h->size;
        size_t i = ((uintptr_t)h->site >> 4) % LEAK_SITES;
        while (sites[i].site && sites[i].site != h->site)
            i = (i + 1) % LEAK_SITES;
        if (!sites[i].site && nsites == LEAK_SITES - 1)
            continue;                 /* table full: count in totals only */
        nsites += !sites[i].site;
        sites[i].site = h->site;
        sites[i].example = h;
        sites[i].count++;
        sites[i].bytes += h->size;
    }
    int fd = report_open();
    struct diag_buf b = { .len = 0 };
    diag_str(&b, "tally: leak report: ");
    diag_dec(&b, blocks);
    diag_str(&b, " debug blocks (");
    diag_dec(&b, bytes);
    diag_str(&b, " bytes) still allocated\n");
    /* Largest first: repeatedly pick the biggest remaining site. */
    for (size_t shown = 0; shown < nsites && shown < 50; shown++) {
        struct leak_site *best = NULL;
        for (size_t i = 0; i < LEAK_SITES; i++)
            if (sites[i].site && (!best || sites[i].bytes > best->bytes))
                best = &sites[i];
        diag_str(&b, "  ");
        diag_dec(&b, best->bytes);
        diag_str(&b, " bytes in ");
        diag_dec(&b, best->count);
        diag_str(&b, " blocks allocated at ");
        report_symbol(&b, best->site);
        for (unsigned i = 1; i < best->example->depth; i++) {
            diag_str(&b, "\n      ");
            report_symbol(&b, best->example->stack[i]);
            report_maybe_flush(&b, fd);
        }
        diag_str(&b, "\n");
        best->site = NULL;
        report_maybe_flush(&b, fd);
    }
    diag_flush(&b, fd);
    report_close(fd);
    lock_give(&debug_lock);
    return blocks;
}
