/*
 * internal.h - the vocabulary every allocator file shares.
 *
 * Glossary (bottom-up):
 *   segment  a 4 MiB, 4 MiB-aligned OS mapping owned by one heap. Its header
 *            sits at its start, so `p & ~SEGMENT_MASK` finds the header of any
 *            block inside it with one AND.
 *   page     a run of one size class inside a segment: 64 KiB in a small
 *            segment, 1 MiB in a medium one. The page descriptor
 *            lives in the segment header, never next to user data.
 *   block    what malloc hands out; while free it holds the next pointer of
 *            its page's free list.
 *   heap     a thread's private set of segments and per-class page queues.
 *            Only the owning thread touches it, except for the atomic
 *            remote-free stack through which other threads give blocks back.
 *   large    a block above the mmap threshold: its own aligned mapping with a
 *            segment-shaped header, resized with mremap.
 *   segmap   one 16-bit tag per 4 MiB of address space: 0 = not ours,
 *            TAG_LARGE, or the owning heap's tag. free() reads it first, so
 *            a foreign pointer is recognised without touching its memory.
 */
#ifndef TALLY_ALLOC_INTERNAL_H
#define TALLY_ALLOC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#define likely(x)   __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define HIDDEN      __attribute__((visibility("hidden")))
#define NOINLINE    __attribute__((noinline))
#define ALWAYS_INLINE inline __attribute__((always_inline))
#define COLD        __attribute__((cold, noinline))
/* Where a function's code lies in libtally.so (alloc/image.ld says why):
 * COLD_TEXT moves a function that a plain run never executes (a mode's,
 * or one the program calls on purpose) out of a resident file's code into
 * the cold segment; WARM_TEXT one that only span and large blocks run
 * into theirs; HOT_TEXT keeps one that every run or every fork()
 * executes with the resident code, though its file's code is cold or
 * warm (span and large blocks). */
#define COLD_TEXT   __attribute__((section(".tally_cold")))
#define WARM_TEXT   __attribute__((section(".tally_warm_fn")))
#define HOT_TEXT    __attribute__((section(".text.tally_hot")))
#define TLS_IE      __attribute__((tls_model("initial-exec")))
/* A large zeroed table that a small program never or barely touches (the
 * heap table, the large cache's slots, the span arenas, debug mode's leak
 * sites): in .lbss, which the linker puts after .bss, so that it does not
 * sit between the small globals every program writes and spread them over
 * more pages. */
#define TABLE_BSS   __attribute__((section(".lbss")))

#define SEGMENT_SHIFT 22                       /* 4 MiB */
#define SEGMENT_SIZE  ((size_t)1 << SEGMENT_SHIFT)
#define SEGMENT_MASK  (SEGMENT_SIZE - 1)
#define PAGE_SHIFT    16                       /* 64 KiB small pages */
#define PAGE_SIZE     ((size_t)1 << PAGE_SHIFT)
#define PAGES_PER_SEGMENT (SEGMENT_SIZE / PAGE_SIZE)
#define MEDIUM_PAGE_SHIFT 20                   /* 1 MiB medium pages */
#define MEDIUM_PAGE_SIZE  ((size_t)1 << MEDIUM_PAGE_SHIFT)
#define MEDIUM_PAGES_PER_SEGMENT (SEGMENT_SIZE / MEDIUM_PAGE_SIZE)
#define OS_PAGE       4096
#define MIN_ALIGN     16

/* Heap tags written into the segmap. 0 is "not tally's memory". */
#define TAG_NONE  0
#define TAG_LARGE 0xFFFE
#define TAG_EMPTY 0xFFFF   /* the tag of a thread that has no heap yet */
#define MAX_HEAPS 0x7FF0   /* below HOOKS_TAG_BIT */
/* OR-ed into the segmap tag by free()'s fast path while an instrumentation
 * mode is on: no heap tag has this bit, so every free misses. */
#define HOOKS_TAG_BIT 0x8000

static inline size_t align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

#endif
