#!/usr/bin/env python3
"""bench/run.py - tally's benchmark runner (python3 standard library only).

Runs each selected workload program under each allocator (LD_PRELOAD),
alternating allocators run by run (A B C A B C ...) so that slow drifts of
the machine hit all of them alike, then prints a time table and a peak-RSS
table with ratios to the system malloc and writes bench/results/latest.csv,
latest.md and latest.svg. See docs/benchmarks.md.

    python3 bench/run.py [--full] [--reps N] [--workloads a,b] [--threads N]
                         [--only tally,system] [--alloc name=/path.so] ...

Layout: harness/allocators.py finds the allocators, harness/cli.py holds
the options every runner takes (bench/scaling.py is the other runner),
harness/suite.py holds the workload table, harness/execute.py runs and
measures one process, harness/summary.py reduces runs to medians,
harness/report.py and harness/svgchart.py write the results.
"""

import argparse
import datetime
import os
import platform
import sys
import time

sys.dont_write_bytecode = True  # keep bench/ free of __pycache__
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

from harness import allocators, cli, execute, report, suite, svgchart  # noqa: E402
from harness.summary import make_cell  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description="tally benchmark runner")
    p.add_argument("--full", action="store_true",
                   help="longer inputs (the seeds' own sizes) and 5 reps")
    p.add_argument("--reps", type=int, help="runs per workload and allocator "
                   "(default 3, 5 with --full)")
    p.add_argument("--workloads", help="comma list of workloads (default all)")
    p.add_argument("--threads", type=int, default=2,
                   help="threads for threaded workloads (default 2)")
    p.add_argument("--timeout", type=float, help="seconds per run before it "
                   "is killed and counted as FAIL (default 300, 1800 with --full)")
    cli.add_common(p, REPO, HERE)
    p.add_argument("--list", action="store_true",
                   help="list workloads and allocators, run nothing")
    args = p.parse_args(argv)
    args.reps = args.reps or (5 if args.full else 3)
    args.timeout = args.timeout or (1800 if args.full else 300)
    if args.reps < 1 or args.threads < 1:
        p.error("--reps and --threads must be at least 1")
    return args


def machine_lines(args, allocs):
    """Date, machine and allocator lines for the report header."""
    glibc = os.confstr("CS_GNU_LIBC_VERSION")
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            thp = f.read().strip()
    except OSError:
        thp = "?"
    lines = [f"- date: {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
             f"- machine: {os.cpu_count()} CPUs, kernel {platform.release()}, "
             f"{glibc}, THP {thp}",
             f"- suite: {'full' if args.full else 'default'}, {args.reps} runs per "
             f"cell, {args.threads} threads, allocators alternating run by run"]
    lines += [f"- {a.name}: {allocators.describe(a)}" for a in allocs]
    if not any(a.name == "tally" for a in allocs):
        lines.append("- tally: NOT in this run (build/libtally.so absent or "
                     "not selected)")
    return lines


def run_all(args, works, allocs):
    """Every run, alternating allocators; returns {(workload, alloc): [Run]}."""
    results = {}
    measure = os.path.join(args.bin_dir, "measure")
    total = len(works) * args.reps * len(allocs)
    done, t_start = 0, time.monotonic()
    for w in works:
        argv = suite.command(w, args.bin_dir, args.full, args.threads)
        for rep in range(1, args.reps + 1):
            for a in allocs:
                run = execute.run_once(measure, argv, a.path, args.timeout, a.options)
                results.setdefault((w.name, a.name), []).append(run)
                done += 1
                status = (f"{run.wall_s:7.3f} s {run.peak_kib / 1024:8.1f} MiB"
                          if run.ok else f"FAIL {run.error}")
                print(f"[{done:3d}/{total}] {w.name:<14} {a.name:<10} run {rep}/"
                      f"{args.reps}  {status}", flush=True)
    print(f"{total} runs in {time.monotonic() - t_start:.0f} s", flush=True)
    return results


def main(argv):
    args = parse_args(argv)
    try:
        works = suite.select(args.workloads)
        allocs = allocators.discover(args.tally, args.alloc, args.only)
    except ValueError as exc:
        sys.exit(f"run.py: {exc}")
    if args.list:
        for w in suite.WORKLOADS:
            print(f"{w.name:<14} {' '.join(suite.command(w, args.bin_dir, args.full, args.threads))}")
        for a in allocs:
            print(f"{a.name:<14} {a.path or '(system malloc)'}")
        return 0
    cli.require_built("run.py", args.bin_dir, works)

    header = machine_lines(args, allocs)
    print("\n".join(header), flush=True)
    results = run_all(args, works, allocs)
    cells = {key: make_cell(runs, next(w.time_metric for w in works if w.name == key[0]))
             for key, runs in results.items()}

    print(report.console(cells, works, allocs))
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.join(args.out_dir, "latest")
    report.write_csv(base + ".csv", cells, works, allocs)
    with open(base + ".md", "w") as f:
        f.write(report.markdown(cells, works, allocs, header))
    subtitle = header[0][2:] + "; " + header[1][2:]
    with open(base + ".svg", "w") as f:
        f.write(svgchart.svg(cells, works, allocs, subtitle))
    print(f"\nwrote {base}.csv, {base}.md, {base}.svg")
    return 1 if any(not c.ok for c in cells.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
