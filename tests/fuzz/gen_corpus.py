#!/usr/bin/env python3
"""Writes the seed corpus for fuzz_alloc (tests/fuzz/corpus/).

Each seed is a short program in the harness's byte language (see
fuzz_alloc.c: an opcode byte, a slot byte, then the op's arguments), one
per area of the allocator, so the fuzzer starts from inputs that already
reach every layer. Usage: python3 tests/fuzz/gen_corpus.py [DIR]
"""
import os
import random
import sys

(MALLOC, CALLOC, REALLOC, REALLOCARRAY, FREE, FREE_SIZED, ALIGNED, USABLE, OPTION, TRIM,
 CHECK, STATS, BULK_ALLOC, BULK_FREE, THREAD) = range(15)

# size selectors (size_decode): selector byte, then a 16-bit value
ZERO, TINY64, TINY128, CLASS, CLASS2, SMALL, MEDIUM, THR64, THR4K, MAX64, MIB, MIBSTEP, \
    OSPAGES, SEGMENT, SMALLISH, ABSURD = range(16)

# option sub-ops (op_option)
DEBUG_ON, DEBUG_OFF, TIMING_ON, TIMING_OFF, PURGE, THRESHOLD, THRESHOLD2, MALLOPT, \
    QUARANTINE, BACKTRACE, BAD_OPTION, LARGE_CACHE, GET_OPTION = range(13)


def size(sel, v):
    return [sel, v & 0xFF, (v >> 8) & 0xFF]


def malloc(slot, sel, v):
    return [MALLOC, slot] + size(sel, v)


def realloc(slot, mode, sel=0, v=0):
    return [REALLOC, slot, mode] + (size(sel, v) if mode >= 6 else [])


def aligned(slot, kind, align_index, sel, v):
    return [ALIGNED, slot, kind, align_index] + size(sel, v)


def option(sub, arg=0):
    return [OPTION, 0, sub, arg]


def free_all():
    return [b for s in range(64) for b in (FREE, s)]


def seed_basic(rnd):
    p = []
    for s in range(24):
        p += malloc(s, rnd.choice([TINY64, TINY128, CLASS, SMALL, SMALLISH]), rnd.randrange(65536))
    for s in range(0, 24, 3):
        p += [FREE, s, USABLE, s + 1, FREE_SIZED, s + 2, 0]
    p += [CALLOC, 30, 3] + size(CLASS, 40) + [CHECK, 0]
    return p


def seed_classes(rnd):
    p = []
    for c in range(56):
        p += malloc(c % 64, CLASS, c | (rnd.randrange(8) << 8))
    return p + [USABLE, 5, STATS, 1, STATS, 2] + free_all()[:64]


def seed_realloc(rnd):
    p = malloc(1, SMALL, 100) + malloc(2, TINY64, 7)
    for mode in [0, 0, 0, 1, 2, 3, 4, 0, 1, 1]:
        p += realloc(1, mode)
    p += realloc(2, 6, MEDIUM, 3000) + realloc(2, 6, MIB, 20) + realloc(2, 1) + realloc(2, 2)
    p += realloc(3, 6, THR64, 70) + realloc(3, 0) + [REALLOCARRAY, 3, 1, 0] + realloc(3, 5)
    return p + realloc(4, 6, ABSURD, 3)


def seed_aligned(rnd):
    p = []
    for k in range(40):
        p += aligned(k % 64, k % 5, rnd.randrange(32), rnd.choice([TINY128, SMALL, MEDIUM]),
                     rnd.randrange(65536))
    return p + [CHECK, 0]


def seed_debug(rnd):
    p = malloc(1, SMALL, 500) + option(DEBUG_ON) + option(QUARANTINE, 1)
    p += malloc(2, TINY64, 5) + [CALLOC, 3, 2] + size(SMALL, 77) + realloc(1, 0)
    p += aligned(4, 0, 6, SMALL, 900) + malloc(5, MIB, 9) + [USABLE, 2, CHECK, 0]
    p += option(DEBUG_OFF) + realloc(2, 0) + [FREE, 3, FREE, 4] + option(BACKTRACE, 1)
    p += option(DEBUG_ON) + malloc(6, CLASS, 30) + [FREE, 6, FREE, 5, CHECK, 0]
    return p + option(DEBUG_OFF)


def seed_threshold(rnd):
    p = option(TIMING_ON) + option(PURGE, 0)
    for arg in range(8):
        p += option(THRESHOLD, arg) + malloc(arg, THR64, rnd.randrange(65536))
        p += malloc(arg + 8, THR4K, rnd.randrange(65536)) + realloc(arg, 0)
    p += option(MALLOPT, 3) + malloc(20, MAX64, 10) + [TRIM, 0, STATS, 2]
    return p + option(TIMING_OFF) + option(BAD_OPTION, 1) + option(GET_OPTION)


def seed_bulk(rnd):
    p = [BULK_ALLOC, 0, 0xFF, 0x07] + size(TINY64, 3)
    p += [BULK_FREE, 0, 0x01, BULK_ALLOC, 0, 0x00, 0x02] + size(SMALL, 1000)
    p += option(PURGE, 0) + [BULK_FREE, 0, 0x80, TRIM, 0, BULK_ALLOC, 0, 0x20, 0]
    return p + size(MEDIUM, 100) + [BULK_FREE, 0, 0x02, BULK_FREE, 0, 0]


def seed_threads(rnd):
    p = []
    for s in range(8):
        p += malloc(s, SMALL, rnd.randrange(65536))
    p += [THREAD, 0, 5] + [FREE, 0, FREE, 1] + malloc(10, TINY64, 1) + realloc(2, 0)
    p += [BULK_ALLOC, 0, 0x00, 0x01] + size(TINY128, 9)
    p += [THREAD, 0, 3, FREE, 10, BULK_FREE, 0, 0x00] + malloc(11, MEDIUM, 5)
    return p + [FREE, 11, TRIM, 0]


def seed_absurd(rnd):
    p = []
    for v in range(10):
        p += malloc(v, ABSURD, v) + [CALLOC, v, 255] + size(SMALL, 1)
        p += aligned(v, v % 5, v, ABSURD, v)
    p += malloc(1, SMALL, 3) + realloc(1, 6, ABSURD, 2) + [REALLOCARRAY, 1, 1, 0]
    return p + [USABLE, 1]


def seed_large(rnd):
    # freed large blocks go to the warm cache; the next requests split,
    # reuse or grow them
    p = option(LARGE_CACHE, 2)
    for s in range(12):
        p += malloc(s, rnd.choice([MIB, MIBSTEP, THR4K, SEGMENT]), rnd.randrange(65536))
    for s in range(0, 12, 2):
        p += [FREE, s]
    for s in range(12, 20):
        p += malloc(s, rnd.choice([MIB, MAX64, OSPAGES]), rnd.randrange(65536))
    p += realloc(1, 0) + realloc(3, 1) + realloc(5, 6, MIB, 999) + [TRIM, 0]
    return p + option(LARGE_CACHE, 0) + [FREE, 7, FREE, 9] + option(LARGE_CACHE, 3)


SEEDS = [seed_basic, seed_classes, seed_realloc, seed_aligned, seed_debug, seed_threshold,
         seed_bulk, seed_threads, seed_absurd, seed_large]


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    rnd = random.Random(1)
    for fn in SEEDS:
        data = bytes(b & 0xFF for b in fn(rnd))
        with open(os.path.join(out, fn.__name__), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
