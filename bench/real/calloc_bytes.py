"""calloc_bytes.py - zeroed buffers a program asks for and barely writes.

CPython's bytes(n) takes its zeroed buffer from calloc. This keeps KEEP
such buffers and makes COUNT of MIN..MAX KiB, writing none of them: an
allocator that clears a reused block by writing it whole faults in every
page, so untouched buffers hold as much memory as written ones
(docs/benchmarks.md, "Real programs").

    python3 bench/real/calloc_bytes.py [MIN MAX KEEP COUNT]   (1024 16384 16 2000)
    build/bench/measure /tmp/r.out -p $PWD/build/libtally.so python3 bench/real/calloc_bytes.py
"""
import random
import sys
import time

lo, hi, keep_n, count = (int(a) for a in (sys.argv[1:] or [1024, 16384, 16, 2000]))
random.seed(1)
keep = [None] * keep_n
t = time.time()
for i in range(count):
    keep[i % keep_n] = bytes(random.randint(lo, hi) << 10)
print("seconds", round(time.time() - t, 3))
