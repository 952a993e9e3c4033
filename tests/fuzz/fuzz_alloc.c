/*
 * fuzz_alloc.c - a libFuzzer harness that drives tally with programs of
 * allocator operations and checks the malloc contract after every one.
 *
 * The input is a byte program: an opcode byte, then that operation's
 * argument bytes (missing bytes read as 0, so every input is a valid
 * program). Operations act on a table of SLOTS blocks and on a bulk pool
 * of small blocks (enough of one class to fill pages, so pages go full,
 * come back and get purged). Every block is filled over its whole usable
 * size with a pattern derived from its slot, size and a per-block counter,
 * so a block that overlaps another, loses its contents to a purge or is
 * handed out twice shows up as a pattern mismatch.
 *
 * tally is linked statically into this binary, so it also serves
 * libFuzzer's own allocations; the harness must therefore never leak
 * across inputs: each input ends by freeing every block and switching the
 * modes back off. A violated invariant prints one line and traps.
 *
 * Build and run: make fuzz FUZZ_SECONDS=600 (tests/fuzz/fuzz.mk). To see
 * what a reproducer does: FUZZ_ALLOC_TRACE=1 build/fuzz/fuzz_alloc FILE
 * prints every operation and every block it makes.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tally.h"

#define SLOTS        64
#define BULK_MAX     8192
#define LIVE_CAP     ((size_t)256 << 20)    /* bytes requested and still live */
#define BULK_CAP     ((size_t)32 << 20)     /* of which in the bulk pool */
#define MAX_OPS      4096                   /* per input */
#define CHECK_EVERY  32                     /* ops between sweeps of all blocks */
#define SAMPLE_ABOVE ((size_t)64 << 10)     /* sweeps sample blocks larger than this */
#define SMALL_LIMIT  8192u                  /* docs/design.md: small classes */
#define MEDIUM_LIMIT (512u << 10)           /* the largest class */

struct slot {
    unsigned char *p;
    size_t size;       /* as requested */
    size_t usable;     /* malloc_usable_size when allocated; all of it is filled */
    uint64_t seed;     /* of the fill pattern */
};

struct bulk {
    unsigned char *p;
    size_t size;
    uint64_t seed;
};

struct reader {
    const uint8_t *data;
    size_t len, pos;
};

static struct slot slots[SLOTS];
static struct bulk bulk[BULK_MAX];
static size_t bulk_count, bulk_bytes;
static size_t live_bytes;
static uint64_t block_counter;
static size_t mmap_threshold = MEDIUM_LIMIT;   /* effective, as tally clamps it */
static unsigned op_index;
static const char *op_name = "start";
static bool in_thread;
static bool debug_used;        /* in this input */
static bool debug_on;          /* now: periodic sweeps add tally_check() */
static uint32_t class_sizes[64];
static unsigned class_count;
static bool trace_on;

/* ---- failure --------------------------------------------------------- */

__attribute__((noreturn, format(printf, 1, 2))) static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "fuzz_alloc: invariant violated at op %u (%s): ", op_index, op_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    __builtin_trap();
}

__attribute__((format(printf, 1, 2))) static void trace(const char *fmt, ...)
{
    if (!trace_on)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
}

/* ---- input decoding ---------------------------------------------------- */

static uint8_t rd8(struct reader *r) { return r->pos < r->len ? r->data[r->pos++] : 0; }

static uint16_t rd16(struct reader *r)
{
    uint16_t lo = rd8(r);
    return (uint16_t)(lo | (uint16_t)rd8(r) << 8);
}

/* The class sizes as docs/design.md states them: 16-byte steps to 128,
 * then four classes per power of two up to 512 KiB. */
static void classes_init(void)
{
    class_count = 0;
    for (uint32_t s = 16; s <= 128; s += 16)
        class_sizes[class_count++] = s;
    for (uint32_t base = 128; base < MEDIUM_LIMIT; base *= 2)
        for (uint32_t k = 1; k <= 4; k++)
            class_sizes[class_count++] = base + base / 4 * k;
}

static size_t size_absurd(unsigned v)
{
    static const size_t absurd[] = {
        SIZE_MAX, SIZE_MAX - 15, (size_t)PTRDIFF_MAX + 1, PTRDIFF_MAX,
        PTRDIFF_MAX - 4096, PTRDIFF_MAX - 64, PTRDIFF_MAX - 15, (size_t)1 << 62,
        (size_t)1 << 48, ((size_t)1 << 48) + 4096,
    };
    return absurd[v % (sizeof absurd / sizeof absurd[0])];
}

/* A size from 3 bytes, spread over the regions where tally's behaviour
 * changes. Sets *absurd for sizes no machine can serve. */
static size_t size_decode(struct reader *r, bool *absurd)
{
    unsigned sel = rd8(r) % 16, v = rd16(r);
    static const int deltas[] = { -16, -15, -1, 0, 1, 2, 15, 16 };
    *absurd = false;
    switch (sel) {
    case 0: return 0;
    case 1: return 1 + v % 64;
    case 2: return 1 + v % 128;
    case 3: case 4: {
        long s = (long)class_sizes[v % class_count] + deltas[(v >> 8) % 8];
        return s < 0 ? 0 : (size_t)s;
    }
    case 5: return 129 + v % (SMALL_LIMIT - 128);
    case 6: return SMALL_LIMIT + 1 + ((size_t)v * 8) % (MEDIUM_LIMIT - SMALL_LIMIT);
    case 7: return mmap_threshold + (size_t)(v % 129) - 64;
    case 8: return mmap_threshold + ((v & 1) ? 4096 : (size_t)-4096) + (v >> 1) % 33 - 16;
    case 9: return MEDIUM_LIMIT + (size_t)(v % 129) - 64;
    case 10: return MEDIUM_LIMIT + ((size_t)v * 64) % ((size_t)4 << 20);   /* a few MiB */
    case 11: return (size_t)(v % 4 == 0 ? 8 + v % 9 : 1 + v % 4) << 20;  /* MiB steps */
    case 12: /* whole OS pages, and one byte either side */
        return (size_t)(v % 256) * 4096 + (v % 256 ? (size_t)(v >> 8) % 3 - 1 : 0);
    case 13: return ((size_t)4 << 20) + (size_t)(v % 257) - 128;        /* a segment */
    case 14: return 16 + v % 1024;
    default:
        *absurd = true;
        return size_absurd(v);
    }
}

static size_t align_decode(uint8_t b)
{
    static const size_t aligns[] = {
        1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768,
        65536, 131072, 262144, (size_t)1 << 20, (size_t)1 << 22, (size_t)1 << 23,
        0, 3, 24, 48, 96, 12288, (size_t)1 << 63, ((size_t)1 << 62) + 1, SIZE_MAX, 40,
    };
    return aligns[b % (sizeof aligns / sizeof aligns[0])];
}

static bool is_pow2(size_t x) { return x && !(x & (x - 1)); }

/* Called through pointers: glibc's headers declare alloc_align on these,
 * and UBSan would then reject the odd alignments the harness passes on
 * purpose (0, 3, 24) before tally ever sees them. */
static int (*volatile call_posix_memalign)(void **, size_t, size_t) = posix_memalign;
static void *(*volatile call_aligned_alloc)(size_t, size_t) = aligned_alloc;
static void *(*volatile call_memalign)(size_t, size_t) = memalign;

/* ---- fill patterns -----------------------------------------------------
 * Byte loops over megabytes: kept out of coverage (their comparisons say
 * nothing about tally and would cost a callback per word). */

#define NO_COVERAGE __attribute__((no_sanitize("coverage")))

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static uint64_t seed_new(unsigned id, size_t size)
{
    return mix(((uint64_t)id << 48) ^ size ^ (++block_counter * 0x9e3779b97f4a7c15ULL));
}

static uint64_t pattern_word(uint64_t seed, size_t i) { return seed + i * 0x9e3779b97f4a7c15ULL; }

NO_COVERAGE static void pattern_fill(unsigned char *p, size_t n, uint64_t seed)
{
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = pattern_word(seed, i);
        __builtin_memcpy(p + i * 8, &w, 8);
    }
    uint64_t w = pattern_word(seed, words);
    memcpy(p + words * 8, &w, n % 8);
}

NO_COVERAGE static bool pattern_word_ok(const unsigned char *p, size_t i, uint64_t seed)
{
    uint64_t w;
    __builtin_memcpy(&w, p + i * 8, 8);
    return w == pattern_word(seed, i);
}

/* Offset of the first byte of p[0..n) that differs from the pattern, or n.
 * A sampled check reads the first and last 4 KiB and one word per 4 KiB. */
NO_COVERAGE static size_t pattern_check(const unsigned char *p, size_t n, uint64_t seed,
                                       bool sampled)
{
    size_t words = n / 8;
    for (size_t i = 0; i < words; i++) {
        if (sampled && i >= 512 && i + 512 < words && i % 512 != 0)
            continue;
        if (!pattern_word_ok(p, i, seed))
            return i * 8;
    }
    uint64_t w = pattern_word(seed, words);
    if (memcmp(p + words * 8, &w, n % 8) != 0)
        return words * 8;
    return n;
}

NO_COVERAGE static size_t first_nonzero(const unsigned char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (p[i])
            return i;
    return n;
}

/* ---- slots --------------------------------------------------------------- */

static void slot_verify(unsigned i, const char *why, bool sampled)
{
    struct slot *s = &slots[i];
    if (!s->p)
        return;
    size_t bad = pattern_check(s->p, s->usable, s->seed, sampled && s->usable > SAMPLE_ABOVE);
    if (bad != s->usable)
        fail("%s: slot %u block %p (size %zu, usable %zu) corrupted at offset %zu", why, i,
             (void *)s->p, s->size, s->usable, bad);
}

/* Checks a fresh block from any allocating call and takes it into slot i. */
static void slot_take(unsigned i, void *p, size_t size, size_t align, bool zeroed)
{
    trace("    slot %u <- %p size %zu align %zu\n", i, p, size, align);
    if (!p)
        fail("NULL for a %zu-byte request (errno %d)", size, errno);
    if (align < 16)
        align = 16;
    if ((uintptr_t)p % align != 0)
        fail("%p of %zu bytes is not %zu-byte aligned", p, size, align);
    size_t usable = malloc_usable_size(p);
    if (usable < size)
        fail("%p: malloc_usable_size %zu < requested %zu", p, usable, size);
    size_t nz = zeroed ? first_nonzero(p, size) : size;
    if (nz != size)
        fail("calloc block %p of %zu bytes not zeroed at offset %zu", p, size, nz);
    struct slot *s = &slots[i];
    *s = (struct slot){ p, size, usable, seed_new(i, size) };
    pattern_fill(s->p, usable, s->seed);
    live_bytes += size;
}

static void slot_forget(unsigned i)
{
    live_bytes -= slots[i].size;
    slots[i] = (struct slot){ 0 };
}

static void slot_free(unsigned i, int how)
{
    struct slot *s = &slots[i];
    if (!s->p)
        return;
    trace("    free slot %u %p (how %d)\n", i, (void *)s->p, how);
    slot_verify(i, "before free", false);
    if (how == 1)
        free_sized(s->p, s->size);
    else if (how == 2)
        free_aligned_sized(s->p, 16, s->size);
    else
        free(s->p);
    slot_forget(i);
}

/* Room for `size` more live bytes, or false: the op is then skipped. */
static bool live_room(size_t size) { return size <= LIVE_CAP - live_bytes; }

/* An absurd request must fail with ENOMEM (or code for the return-code
 * functions) and must not disturb anything. */
static void expect_enomem(void *p, int err, const char *call, size_t size)
{
    trace("    %s(%zu) -> %p errno %d (absurd)\n", call, size, p, err);
    if (p)
        fail("%s(%zu) succeeded (%p); expected ENOMEM", call, size, p);
    if (err != ENOMEM)
        fail("%s(%zu) failed with errno %d, expected ENOMEM", call, size, err);
}

/* ---- operations -------------------------------------------------------- */

static void op_malloc(struct reader *r, unsigned i)
{
    bool absurd;
    size_t size = size_decode(r, &absurd);
    if (absurd) {
        errno = 0;
        void *p = malloc(size);
        expect_enomem(p, errno, "malloc", size);
        return;
    }
    if (!live_room(size))
        return;
    slot_free(i, 0);
    slot_take(i, malloc(size), size, 16, false);
}

static void op_calloc(struct reader *r, unsigned i)
{
    uint8_t n = rd8(r);
    bool absurd;
    size_t size = size_decode(r, &absurd);
    if (absurd || n == 255) {
        size_t count = n == 255 ? ((size_t)1 << 60) + n : 1 + n % 4;
        errno = 0;
        void *p = calloc(count, absurd ? size : 16 + size);
        expect_enomem(p, errno, "calloc", size);
        return;
    }
    size_t count = n % 8;
    if (size > ((size_t)16 << 20) / 8 + 1 || !live_room(count * size))
        return;
    slot_free(i, 0);
    slot_take(i, calloc(count, size), count * size, 16, true);
}

static size_t realloc_target(struct reader *r, const struct slot *s, bool *absurd)
{
    uint8_t mode = rd8(r) % 8;
    *absurd = false;
    switch (mode) {
    case 0: return s->size * 2 + 1;
    case 1: return s->size / 2;
    case 2: return s->usable / 2 + 1;       /* tally's "more than half wasted" edge */
    case 3: return s->size;
    case 4: return s->usable + 1;
    case 5: return 0;
    default: return size_decode(r, absurd);
    }
}

static void op_realloc(struct reader *r, unsigned i, bool array)
{
    struct slot *s = &slots[i];
    bool absurd;
    size_t size = realloc_target(r, s, &absurd);
    if (array && rd8(r) % 4 == 0) {           /* reallocarray overflow */
        errno = 0;
        void *q = reallocarray(s->p, ((size_t)1 << 62) + 1, 4 + size % 64);
        expect_enomem(q, errno, "reallocarray", size);
        slot_verify(i, "after failed reallocarray", false);
        return;
    }
    if (absurd) {
        errno = 0;
        void *q = realloc(s->p, size);
        expect_enomem(q, errno, "realloc", size);
        slot_verify(i, "after failed realloc", false);
        return;
    }
    if (size > s->size && !live_room(size - s->size))
        return;
    slot_verify(i, "before realloc", false);
    struct slot old = *s;
    void *q = array ? reallocarray(s->p, 1, size) : realloc(s->p, size);
    if (size == 0 && old.p) {
        /* glibc's rule, which tally follows: realloc(p, 0) frees p. */
        if (q)
            fail("realloc(%p, 0) returned %p, expected NULL (block freed)", (void *)old.p, q);
        slot_forget(i);
        return;
    }
    if (!q)
        fail("realloc(%p, %zu) returned NULL (errno %d)", (void *)old.p, size, errno);
    size_t keep = old.size < size ? old.size : size;
    size_t bad = pattern_check(q, keep, old.seed, false);
    if (bad != keep)
        fail("realloc(%p -> %p, %zu -> %zu) lost the prefix at offset %zu", (void *)old.p, q,
             old.size, size, bad);
    live_bytes -= old.size;
    slot_take(i, q, size, 16, false);
}

static void op_aligned(struct reader *r, unsigned i)
{
    uint8_t kind = rd8(r) % 5;
    size_t align = align_decode(rd8(r));
    bool absurd;
    size_t size = size_decode(r, &absurd);
    if (!absurd && !live_room(size + (kind >= 3 ? 4096 : 0)))
        return;
    /* A valid alignment no mapping can honour fails like an absurd size
     * (memalign rounds an odd one up to a power of two first, and refuses
     * those above 2^63 with EINVAL, checked below, as glibc does). */
    if (kind <= 1)
        absurd |= is_pow2(align) && align >= ((size_t)1 << 48);
    else if (kind == 2 && align <= ((size_t)1 << 63))
        absurd |= align > ((size_t)1 << 47);
    slot_free(i, 0);
    void *p = (void *)1;
    size_t want_align = align;
    errno = 0;
    switch (kind) {
    case 0: {
        int rc = call_posix_memalign(&p, align, size);
        bool valid = is_pow2(align) && align % sizeof(void *) == 0;
        if (!valid) {
            if (rc != EINVAL || p != (void *)1)
                fail("posix_memalign(align %zu) returned %d, expected EINVAL", align, rc);
            return;
        }
        if (absurd) {
            if (rc != ENOMEM)
                fail("posix_memalign(%zu, %zu) returned %d, expected ENOMEM", align, size, rc);
            return;
        }
        if (rc != 0)
            fail("posix_memalign(%zu, %zu) returned %d", align, size, rc);
        break;
    }
    case 1:
        p = call_aligned_alloc(align, size);
        if (!is_pow2(align)) {
            if (p || errno != EINVAL)
                fail("aligned_alloc(align %zu) gave %p errno %d, expected EINVAL", align, p, errno);
            return;
        }
        break;
    case 2:
        p = call_memalign(align, size);
        if (align > ((size_t)1 << 63)) {
            if (p || errno != EINVAL)
                fail("memalign(align %zu) gave %p errno %d, expected EINVAL", align, p, errno);
            return;
        }
        while (!is_pow2(want_align))            /* glibc rounds up */
            want_align = want_align ? (want_align | (want_align - 1)) + 1 : 1;
        break;
    case 3:
        p = valloc(size);
        want_align = 4096;
        break;
    default:
        p = pvalloc(size);
        want_align = 4096;
        if (p && !absurd)
            size = size ? (size + 4095) & ~(size_t)4095 : 4096;
        break;
    }
    if (absurd) {
        expect_enomem(p, errno, "aligned family", size);
        return;
    }
    slot_take(i, p, size, want_align, false);
}

static void op_usable(unsigned i)
{
    if (malloc_usable_size(NULL) != 0)
        fail("malloc_usable_size(NULL) != 0");
    struct slot *s = &slots[i];
    if (!s->p)
        return;
    size_t u = malloc_usable_size(s->p);
    if (u != s->usable)
        fail("malloc_usable_size(%p) changed from %zu to %zu", (void *)s->p, s->usable, u);
    slot_verify(i, "usable", false);
}

static void option_must(const char *name, const char *value)
{
    trace("    option %s=%s\n", name, value);
    if (tally_option_set(name, value) != 0)
        fail("tally_option_set(%s, %s) failed (errno %d)", name, value, errno);
}

static size_t threshold_effective(size_t v)
{
    return v < SMALL_LIMIT ? SMALL_LIMIT : v > MEDIUM_LIMIT ? MEDIUM_LIMIT : v;
}

static void op_option(struct reader *r)
{
    static const char *const delays[] = { "0", "1", "10", "1000" };
    static const char *const thresholds[] = { "0", "8k", "8193", "64k", "100000", "256k",
                                              "512k", "1m" };
    static const size_t threshold_values[] = { 0, 8192, 8193, 65536, 100000, 262144,
                                               524288, 1048576 };
    static const char *const quarantines[] = { "0", "64k", "4m" };
    static const char *const caches[] = { "0", "1m", "16m", "128m" };
    uint8_t sub = rd8(r), arg = rd8(r);
    switch (sub % 13) {
    case 0: option_must("debug", "1"); debug_used = debug_on = true; break;
    case 1: option_must("debug", "0"); debug_on = false; break;
    case 2: option_must("timing", "1"); break;
    case 3: option_must("timing", "0"); break;
    case 4: option_must("purge_delay", delays[arg % 4]); break;
    case 5: case 6:
        option_must("mmap_threshold", thresholds[arg % 8]);
        mmap_threshold = threshold_effective(threshold_values[arg % 8]);
        break;
    case 7: {
        int v = (int)threshold_values[arg % 8];
        if (mallopt(M_MMAP_THRESHOLD, v) != 1)
            fail("mallopt(M_MMAP_THRESHOLD, %d) refused", v);
        mmap_threshold = threshold_effective((size_t)v);
        break;
    }
    case 8: option_must("quarantine", quarantines[arg % 3]); break;
    case 9: option_must("backtrace", arg % 2 ? "4" : "0"); break;
    case 10: {
        static const char *const bad[][2] = { { "nonsense", "1" }, { "debug", "2" },
                                              { "purge_delay", "x" }, { "timing", "" } };
        errno = 0;
        if (tally_option_set(bad[arg % 4][0], bad[arg % 4][1]) != -1 || errno != EINVAL)
            fail("tally_option_set(%s, %s) accepted a bad option", bad[arg % 4][0],
                 bad[arg % 4][1]);
        break;
    }
    case 11: option_must("large_cache", caches[arg % 4]); break;
    default: {
        uint64_t v;
        if (tally_option_get("mmap_threshold", &v) != 0 || threshold_effective(v) != mmap_threshold)
            fail("tally_option_get(mmap_threshold) disagrees with %zu", mmap_threshold);
        break;
    }
    }
}

/* Sweeps every block; with_tally adds tally_check() (fences of every live
 * debug block, poison of the whole quarantine: milliseconds). */
static void check_all(const char *why, bool with_tally)
{
    for (unsigned i = 0; i < SLOTS; i++)
        slot_verify(i, why, true);
    for (size_t k = 0; k < bulk_count; k++) {
        struct bulk *b = &bulk[k];
        if (pattern_check(b->p, b->size, b->seed, true) != b->size)
            fail("%s: bulk block %p (size %zu) corrupted", why, (void *)b->p, b->size);
    }
    size_t problems = with_tally ? tally_check() : 0;
    if (problems)
        fail("%s: tally_check() found %zu problems", why, problems);
}

static void op_stats(uint8_t sub)
{
    struct tally_stats st = { .size = sizeof st };
    if (tally_stats_get(&st) != 0 || st.version < 1)
        fail("tally_stats_get failed");
    if (sub % 2) {
        struct mallinfo2 mi = mallinfo2();     /* walks the segments: must not crash */
        (void)mi;
    } else {
        struct tally_timing t = { .size = sizeof t };
        if (tally_timing_get(&t) != 0)
            fail("tally_timing_get failed");
    }
}

/* ---- the bulk pool: many blocks of one size ------------------------------- */

static void op_bulk_alloc(struct reader *r)
{
    uint16_t n = rd16(r);
    bool absurd;
    size_t size = size_decode(r, &absurd);
    if (absurd || size > (size_t)64 << 10)
        size %= 1024;
    size_t count = 1 + n % 2048;
    for (size_t k = 0; k < count && bulk_count < BULK_MAX && live_room(size) &&
                       bulk_bytes + size <= BULK_CAP; k++) {
        unsigned char *p = malloc(size);
        if (!p || (uintptr_t)p % 16 != 0)
            fail("bulk malloc(%zu) returned %p (errno %d)", size, (void *)p, errno);
        struct bulk *b = &bulk[bulk_count++];
        *b = (struct bulk){ p, size, seed_new(SLOTS + (unsigned)(k & 0xff), size) };
        pattern_fill(p, size, b->seed);
        live_bytes += size;
        bulk_bytes += size;
    }
}

static void bulk_free_at(size_t k)
{
    struct bulk *b = &bulk[k];
    if (pattern_check(b->p, b->size, b->seed, false) != b->size)
        fail("bulk block %p (size %zu) corrupted before free", (void *)b->p, b->size);
    free(b->p);
    live_bytes -= b->size;
    bulk_bytes -= b->size;
    b->p = NULL;
}

/* Frees every stride-th block starting at `first` (LIFO or FIFO for stride
 * 1), then compacts the pool. */
static void op_bulk_free(struct reader *r)
{
    uint8_t how = rd8(r);
    size_t stride = 1 + how % 4, first = (how >> 2) % stride;
    if (how & 0x80) {
        for (size_t k = bulk_count; k-- > 0;)
            if (k % stride == first)
                bulk_free_at(k);
    } else {
        for (size_t k = first; k < bulk_count; k += stride)
            bulk_free_at(k);
    }
    size_t out = 0;
    for (size_t k = 0; k < bulk_count; k++)
        if (bulk[k].p)
            bulk[out++] = bulk[k];
    bulk_count = out;
}

/* ---- another thread ------------------------------------------------------- */

static void run_ops(struct reader *r, unsigned max_ops);

struct thread_job {
    struct reader *r;
    unsigned ops;
};

static void *thread_main(void *arg)
{
    struct thread_job *job = arg;
    in_thread = true;
    run_ops(job->r, job->ops);
    in_thread = false;
    return NULL;
}

/* Runs the next few ops in a new thread while this one waits: its frees of
 * this thread's blocks are remote frees, and its blocks outlive it in a
 * parked heap, freed later from here. */
static void op_thread(struct reader *r)
{
    struct thread_job job = { r, 1 + rd8(r) % 8 };
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, &job) != 0)
        return;
    pthread_join(t, NULL);
}

/* ---- the interpreter ------------------------------------------------------- */

enum {
    OP_MALLOC, OP_CALLOC, OP_REALLOC, OP_REALLOCARRAY, OP_FREE, OP_FREE_SIZED, OP_ALIGNED,
    OP_USABLE, OP_OPTION, OP_TRIM, OP_CHECK, OP_STATS, OP_BULK_ALLOC, OP_BULK_FREE,
    OP_THREAD, OP_MALLOC2, OP_COUNT
};

static const char *const op_names[OP_COUNT] = {
    "malloc", "calloc", "realloc", "reallocarray", "free", "free_sized", "aligned",
    "usable_size", "option", "malloc_trim", "check", "stats", "bulk_alloc", "bulk_free",
    "thread", "malloc",
};

static void run_op(struct reader *r, unsigned op)
{
    unsigned i = rd8(r) % SLOTS;
    switch (op) {
    case OP_MALLOC: case OP_MALLOC2: op_malloc(r, i); break;
    case OP_CALLOC: op_calloc(r, i); break;
    case OP_REALLOC: op_realloc(r, i, false); break;
    case OP_REALLOCARRAY: op_realloc(r, i, true); break;
    case OP_FREE: slot_free(i, 0); break;
    case OP_FREE_SIZED: slot_free(i, 1 + rd8(r) % 2); break;
    case OP_ALIGNED: op_aligned(r, i); break;
    case OP_USABLE: op_usable(i); break;
    case OP_OPTION: op_option(r); break;
    case OP_TRIM: malloc_trim(0); break;
    case OP_CHECK: check_all("check op", debug_used); break;
    case OP_STATS: op_stats((uint8_t)i); break;
    case OP_BULK_ALLOC: op_bulk_alloc(r); break;
    case OP_BULK_FREE: op_bulk_free(r); break;
    default:
        if (!in_thread)
            op_thread(r);
        break;
    }
}

static void run_ops(struct reader *r, unsigned max_ops)
{
    for (unsigned n = 0; n < max_ops && r->pos < r->len && op_index < MAX_OPS; n++) {
        unsigned op = rd8(r) % OP_COUNT;
        op_name = op_names[op];
        op_index++;
        trace("op %u%s: %s (input offset %zu)\n", op_index, in_thread ? " [thread]" : "",
              op_name, r->pos - 1);
        run_op(r, op);
        if (op_index % CHECK_EVERY == 0)
            check_all("periodic sweep", debug_on);
    }
}

/* Frees everything and puts every option back, so no input leaks blocks
 * or modes into the next one (or into libFuzzer's own allocations). */
static void reset_all(void)
{
    op_name = "end of input";
    check_all("end of input", debug_used);
    for (unsigned i = 0; i < SLOTS; i++)
        slot_free(i, 0);
    for (size_t k = 0; k < bulk_count; k++)
        bulk_free_at(k);
    bulk_count = 0;
    if (live_bytes != 0)
        fail("live byte count %zu after freeing everything", live_bytes);
    option_must("debug", "0");
    option_must("timing", "0");
    option_must("backtrace", "0");
    option_must("quarantine", "4m");
    option_must("purge_delay", "10");
    option_must("mmap_threshold", "512k");
    option_must("large_cache", "256m");
    mmap_threshold = MEDIUM_LIMIT;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!class_count) {
        classes_init();
        trace_on = getenv("FUZZ_ALLOC_TRACE") != NULL;
    }
    struct reader r = { data, size, 0 };
    block_counter = 0;
    op_index = 0;
    debug_used = debug_on = false;
    run_ops(&r, MAX_OPS);
    reset_all();
    return 0;
}
