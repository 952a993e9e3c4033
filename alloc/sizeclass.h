/*
 * sizeclass.h - request size to size class, and back.
 *
 * Classes: 16-byte steps up to 128 B (malloc's 16-byte alignment makes
 * anything finer pointless), then eight classes per power of two up to
 * 512 KiB, so a class never exceeds a request by more than 12.5 % (and
 * by about 6 % on average; a borrowed block, below, by up to 37.5 %, and
 * a young heap's paired class by up to 25 %). Classes up to SMALL_MAX
 * live in 64 KiB pages; larger ("medium") ones in 1 MiB pages, four to a
 * segment: at least 7 blocks a page up to 128 KiB, 1 to 7 above it (the
 * requests there are mostly span blocks, span.h, and the medium classes
 * serve those whose gate is shut). The fast path needs no
 * class lookup at all: each heap's direct[] table maps (size + 15) / 16
 * straight to the class's page.
 */
#ifndef TALLY_SIZECLASS_H
#define TALLY_SIZECLASS_H

#include "internal.h"

#define SMALL_MAX   8192u
#define MEDIUM_MAX  (512u * 1024u)
#define NUM_SMALL_CLASSES 56
#define NUM_CLASSES 104

/* A small class from SIZECLASS_BORROW_FIRST on that has no room of its
 * own may be served a free block of up to SIZECLASS_BORROW_REACH classes
 * up (heap.c says why), so malloc_usable_size can exceed the class size. */
#define SIZECLASS_BORROW_FIRST 8
#define SIZECLASS_BORROW_REACH 2

/* A young heap (heap.c) serves the small classes from SIZECLASS_COARSE_FIRST
 * up in pairs, each pair from the upper class's pages: four classes per
 * power of two, so a block exceeds its request by at most 25 %. */
#define SIZECLASS_COARSE_FIRST 8

extern HIDDEN const uint32_t sizeclass_block_size[NUM_CLASSES];

/* cls, or the upper class of its pair when cls is the lower one. */
static inline unsigned sizeclass_coarse(unsigned cls)
{
    return cls >= SIZECLASS_COARSE_FIRST && cls < NUM_SMALL_CLASSES &&
                   ((cls - SIZECLASS_COARSE_FIRST) & 1) == 0
               ? cls + 1
               : cls;
}

/* floor(off / block size of cls) without a divide: (off * magic) >> 42 is
 * exact for every offset inside a segment (off < 2^22) and block size
 * <= 2^19, because magic = floor(2^42 / size) + 1 overshoots by less than
 * 1/size. (A test checks every class against real division.) */
#define SIZECLASS_DIV_SHIFT 42
extern HIDDEN const uint64_t sizeclass_div_magic[NUM_CLASSES];

static inline uint32_t sizeclass_div(uint32_t off, unsigned cls)
{
    return (uint32_t)(((uint64_t)off * sizeclass_div_magic[cls]) >> SIZECLASS_DIV_SHIFT);
}

/* Precondition: 128 < size <= MEDIUM_MAX. */
static inline unsigned sizeclass_of_medium(size_t size)
{
    size_t s = size - 1;
    unsigned b = 63u - (unsigned)__builtin_clzl(s);
    unsigned k = (unsigned)(s >> (b - 3)) & 7u;
    return 8u + (b - 7u) * 8u + k;
}

/* The same by table, entry (size - 1) >> 10: above SMALL_MAX every class
 * size is a multiple of 1 KiB, so the KiB a request reaches into decides
 * its class (4 instructions against the computation's 10; a 50,000 B
 * pair 105 -> 99). sizeclass.c builds it from the formula above; malloc's
 * medium lane reads its copy with the span bits (init.h). */
extern HIDDEN const uint8_t sizeclass_medium_by_kib[MEDIUM_MAX >> 10];

/* Precondition: size <= MEDIUM_MAX. */
static inline unsigned sizeclass_of(size_t size)
{
    if (size <= 128)
        return size == 0 ? 0 : (unsigned)((size + 15) >> 4) - 1;
    return sizeclass_of_medium(size);
}

#endif
