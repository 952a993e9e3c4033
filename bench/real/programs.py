#!/usr/bin/env python3
"""programs.py - real programs under each allocator (`make bench-real`).

The suite's workloads are small programs that each stress one shape. This
runs programs people preload an allocator under: sqlite3, perl, CPython,
node, gcc, git, sort and xz, on inputs it writes into a temporary
directory, each under every installed allocator in turn (the allocators
alternate run by run, as in the suite), and prints the median wall time
and peak RSS with their ratios to glibc's, as a Markdown table.

A program that is not installed is skipped (git also outside a clone). Each run goes through
build/bench/measure (LD_PRELOAD, wall time, and peak RSS: ru_maxrss of
the biggest process in the run, the program, not its pipe's `wc`; the
shell measure starts is the process it traces, so its VmHWM adds
nothing here); a run that fails
is reported as FAIL. The workloads are deterministic, so their outputs
are compared too: an allocator whose run prints something else fails.

usage: python3 bench/real/programs.py [--reps N] [--tally PATH] [--only a,b]
                                      [--alloc n=p.so] [--programs x,y]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "bench"))
from harness import allocators  # noqa: E402

SQL = """CREATE TABLE t(a INTEGER, b TEXT, c REAL);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 400000)
INSERT INTO t SELECT x, printf('%08x%08x', x * 2654435761 % 4294967296, x * 40503), x * 1.5 FROM c;
CREATE INDEX ib ON t(b);
SELECT count(*), sum(length(b)) FROM t WHERE b > '8';
SELECT a % 1000 AS k, count(*) FROM t GROUP BY k ORDER BY k LIMIT 3;
"""

PERL = r"""my %h; for my $i (1..600000) { $h{"k$i"} = [ $i, "v" x ($i % 50), { n => $i } ]; }
my $s = join(",", map { $_ . "=" . scalar(@{$h{$_}}) } sort keys %h);
print length($s), "\n";
"""

NODE = r"""let m = new Map();
for (let i = 0; i < 1000000; i++) m.set('k' + i, {a: i, b: 'v'.repeat(i % 30)});
let s = JSON.stringify([...m.entries()]); let o = JSON.parse(s);
console.log(s.length, o.length);
"""


def write_inputs(d):
    """The programs' inputs, written into d; returns their paths."""
    paths = {k: os.path.join(d, k) for k in ("t.sql", "t.pl", "t.js", "words.txt", "w20.txt", "big.i")}
    with open(paths["t.sql"], "w") as f:
        f.write(SQL)
    with open(paths["t.pl"], "w") as f:
        f.write(PERL)
    with open(paths["t.js"], "w") as f:
        f.write(NODE)
    # 2M lines of a fixed pseudo-random sequence (an LCG: no seed to vary).
    x = 12345
    with open(paths["words.txt"], "w") as f:
        lines = []
        for i in range(2000000):
            x = (x * 6364136223846793005 + 1442695040888963407) % (1 << 64)
            lines.append("%08x %d %s\n" % (x >> 32, (x >> 12) % 1000000, "x" * ((x >> 20) % 41)))
            if len(lines) == 10000:
                f.write("".join(lines))
                lines = []
    with open(paths["words.txt"], "rb") as src, open(paths["w20.txt"], "wb") as dst:
        dst.write(src.read(20000000))
    if shutil.which("gcc"):
        subprocess.run(["gcc", "-E", "-I", os.path.join(REPO, "alloc"),
                        os.path.join(REPO, "alloc", "span.c"), "-o", paths["big.i"]], check=True)
    return paths


def programs(p):
    """(name, what, needs, shell command) for each program."""
    json_py = os.path.join(REPO, "bench", "real", "json_roundtrip.py")
    return [
        ("sqlite3", "400,000 rows into an in-memory table, an index, two queries", "sqlite3",
         "sqlite3 :memory: < %s" % p["t.sql"]),
        ("perl", "a hash of 600,000 entries of arrays and hashes, sorted and joined", "perl",
         "perl %s" % p["t.pl"]),
        ("python3", "json round trip of a dict of 300,000 lists (json_roundtrip.py)", "python3",
         "python3 %s" % json_py),
        ("node", "a Map of 1,000,000 objects through JSON.stringify and parse", "node",
         "node %s" % p["t.js"]),
        ("gcc", "gcc -O2 of tally's preprocessed span.c", "gcc",
         "gcc -O2 -c -x cpp-output %s -o /dev/null" % p["big.i"]),
        ("git", "git log -p --stat -n 300 of this repository", "git",
         "cd %s && git log -p --stat -n 300 | wc -c" % REPO),
        ("sort", "sort of 2M lines (74 MB) with a 200 MB buffer", "sort",
         "sort -S 200M %s | tail -1" % p["words.txt"]),
        ("sort -p2", "the same with --parallel=2 and a 100 MB buffer", "sort",
         "sort --parallel=2 -S 100M %s | tail -1" % p["words.txt"]),
        ("xz -T2", "xz -1 -T2 of 20 MB", "xz",
         "xz -1 -T2 -c %s | wc -c" % p["w20.txt"]),
    ]


def run_once(measure, so, cmd, d):
    out = os.path.join(d, "measure.out")
    argv = [measure, out] + (["-p", so] if so else []) + ["/bin/sh", "-c", cmd]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    with open(out) as f:
        fields = f.read().split()
    kv = dict(zip(fields[0::2], fields[1::2]))
    ok = r.returncode == 0 and kv.get("status") == "0"
    return ok, r.stdout, float(kv["wall_s"]), int(kv.get("peak_kib", kv["maxrss_kib"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tally", help="tally's .so (default build/libtally.so)")
    ap.add_argument("--only", help="comma list of allocators")
    ap.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH",
                    help="add an allocator .so (repeatable)")
    ap.add_argument("--programs", help="comma list of programs")
    args = ap.parse_args()
    measure = os.path.join(REPO, "build", "bench", "measure")
    if not os.path.exists(measure):
        sys.exit("programs.py: build/bench/measure missing (make bench-build)")
    allocs = [(a.name, a.path) for a in allocators.from_args("programs.py", args)]
    with tempfile.TemporaryDirectory(prefix="tally-real-") as d:
        p = write_inputs(d)
        progs = [g for g in programs(p) if shutil.which(g[2]) and
                 (g[0] != "git" or os.path.isdir(os.path.join(REPO, ".git")))]
        if args.programs:
            progs = [g for g in progs if g[0] in args.programs.split(",")]
        res = {}
        for name, _, _, cmd in progs:
            expect = None
            for rep in range(args.reps):
                for an, so in allocs:
                    ok, out, wall, rss = run_once(measure, so, cmd, d)
                    if expect is None and ok:
                        expect = out
                    ok = ok and out == expect
                    res.setdefault((name, an), []).append((ok, wall, rss))
                    print("%-9s %-9s run %d/%d %7.2f s %8.1f MiB%s" % (
                        name, an, rep + 1, args.reps, wall, rss / 1024, "" if ok else "  FAIL"),
                        file=sys.stderr)
    names = [a[0] for a in allocs]
    print("| program | what it does | " + " | ".join(names) + " |")
    print("|---|---|" + "---:|" * len(names))
    for name, what, _, _ in progs:
        cells = []
        base = res.get((name, "system"))
        bt = statistics.median(r[1] for r in base) if base else None
        br = statistics.median(r[2] for r in base) if base else None
        for an in names:
            v = res[(name, an)]
            if not all(r[0] for r in v):
                cells.append("FAIL")
                continue
            t = statistics.median(r[1] for r in v)
            m = statistics.median(r[2] for r in v)
            ratio = " (%.2f, %.2f)" % (t / bt, m / br) if bt else ""
            cells.append("%.2f s, %.1f MiB%s" % (t, m / 1024, ratio))
        print("| %s | %s | %s |" % (name, what, " | ".join(cells)))


if __name__ == "__main__":
    main()
