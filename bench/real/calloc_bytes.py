"""calloc_bytes.py - zeroed buffers a program asks for and barely writes.

CPython's bytes(n) takes its zeroed buffer from calloc. This keeps 16
such buffers and makes 2,000 of 1-16 MiB, writing none of them: an
allocator that clears a reused block by writing it whole faults in every
page, so untouched buffers hold as much memory as written ones
(docs/benchmarks.md, "Real programs").

    build/bench/measure /tmp/r.out -p $PWD/build/libtally.so python3 bench/real/calloc_bytes.py
"""
import random
import time

random.seed(1)
keep = [None] * 16
t = time.time()
for i in range(2000):
    keep[i % 16] = bytes(random.randint(1, 16) << 20)
print("seconds", round(time.time() - t, 3))
