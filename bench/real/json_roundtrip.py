"""json_roundtrip.py - a real program's phases for docs/benchmarks.md.

Builds a dict of 300,000 lists, json.dumps it to a 40 MB string and
json.loads it back. CPython's json.dumps mallocs about 50 buffers of
800 KB and frees them as it ends; json.loads then builds its objects
in pymalloc's own mappings and calls malloc rarely, so an allocator that
keeps freed big blocks resident carries them through to the peak.

    build/bench/measure /tmp/r.out -p $PWD/build/libtally.so python3 bench/real/json_roundtrip.py
"""
import json
import random

random.seed(1)
d = {}
for i in range(300000):
    d[str(i)] = [random.random() for _ in range(5)] + [str(i) * 3]
s = json.dumps(d)
e = json.loads(s)
print(len(s), len(e))
