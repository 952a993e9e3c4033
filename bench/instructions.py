#!/usr/bin/env python3
"""bench/instructions.py - instructions per malloc+free pair (callgrind).

`make bench-instructions` runs build/bench/instr_pairs SIZE N under
valgrind's callgrind for N pairs and for 0 pairs, for each allocator and
each size (16, 256, 4000 B, and a calloc(1, 64)+free pair), and prints
(I(N) - I(0)) / N: the instructions of one pair, loop included.
Instruction counts do not depend on machine noise, so this is the number
to watch for fast-path changes.

The allocator is preloaded as `LD_PRELOAD=lib.so valgrind ... prog`:
valgrind passes LD_PRELOAD on to the program (adding its own preloads),
whereas `valgrind env LD_PRELOAD=... prog` would trace env instead. Equal
counts for two allocators would mean the preload did not take; that is
reported.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from harness import allocators, cli  # noqa: E402

# (size, call): the rows of the table.
ROWS = [(16, "malloc"), (256, "malloc"), (4000, "malloc"), (64, "calloc")]
COLLECTED = re.compile(r"Collected\s*:\s*(\d+)")


def count(prog, size, call, pairs, preload):
    """Instructions callgrind collects for one run of instr_pairs."""
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
           prog, str(size), str(pairs), call]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    found = COLLECTED.search(res.stderr)
    if res.returncode != 0 or not found:
        raise RuntimeError(f"callgrind failed (exit {res.returncode}): "
                           f"{res.stderr.strip()[-300:]}")
    return int(found.group(1))


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=100000)
    cli.add_allocators(p)
    args, ignored = p.parse_known_args(argv)
    if ignored:
        print(f"instructions.py: ignoring {' '.join(ignored)}")
    if shutil.which("valgrind") is None:
        print("instructions.py: valgrind not installed; skipping "
              "(apt-get install valgrind)")
        return 0
    prog = os.path.join(REPO, "build", "bench", "instr_pairs")
    if not os.path.isfile(prog):
        sys.exit("instructions.py: build/bench/instr_pairs missing (make bench-build)")
    allocs = allocators.from_args("instructions.py", args)

    table = {}
    for a in allocs:
        for row in ROWS:
            size, call = row
            try:
                base = count(prog, size, call, 0, a.path)
                full = count(prog, size, call, args.pairs, a.path)
                table[(a.name, row)] = (full - base) / args.pairs
            except (RuntimeError, subprocess.SubprocessError) as exc:
                print(f"{a.name} {label(row)}: {exc}")
                table[(a.name, row)] = None
            print(f"  {a.name:<10} {label(row):>12}: {fmt(table[(a.name, row)])} "
                  "instructions per pair", flush=True)

    names = [a.name for a in allocs]
    lines = [f"Instructions per malloc+free pair (callgrind, loop included, "
             f"{args.pairs} pairs minus 0 pairs)", "",
             "| size | " + " | ".join(names) + " |",
             "|---|" + "---:|" * len(names)]
    for row in ROWS:
        lines.append(f"| {label(row)} | " +
                     " | ".join(fmt(table[(n, row)]) for n in names) + " |")
    print("\n" + "\n".join(lines))
    for a in allocs:
        same = [b.name for b in allocs if b.name < a.name and all(
            table[(a.name, r)] == table[(b.name, r)] for r in ROWS)]
        if same:
            print(f"WARNING: {a.name} counts equal {', '.join(same)}'s: "
                  "was the allocator really preloaded?")
    out = os.path.join(HERE, "results", "latest-instructions.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"\nwrote {out}")
    return 0


def label(row):
    size, call = row
    return f"{size} B" if call == "malloc" else f"{call} {size} B"


def fmt(x):
    return "FAIL" if x is None else f"{x:.0f}"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
