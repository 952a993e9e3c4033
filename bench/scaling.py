#!/usr/bin/env python3
"""bench/scaling.py - the threaded workloads at several thread counts.

    python3 bench/scaling.py [--threads 1,2,4,8] [--reps N] [--workloads a,b]
                             [--only tally,system] [--alloc name=/path.so] ...
    make bench-scaling BENCH_ARGS="--threads 1,2,4,8,16"

Runs every threaded workload of the suite (bench/harness/suite.py) at each
thread count under each allocator, alternating the allocators run by run as
bench/run.py does, and writes bench/results/scaling.md and scaling.csv:
per workload, the median time and peak RSS at each thread count, tally
against the best peer, and each allocator's throughput relative to its own
one-thread run. Throughput counts the work done: a workload whose threads
each do a fixed amount (Workload.work_per_thread) does t times the work at
t threads, so ideal scaling keeps its time flat while t <= cores; a
workload with a fixed total should get t times faster.

With more threads than CPUs the threads take turns on the cores, and
what the curve then shows is how an allocator copes with preemption: a
thread descheduled while it holds a lock, or with its cache cold.
"""

import argparse
import csv
import os
import sys

sys.dont_write_bytecode = True  # keep bench/ free of __pycache__
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import HERE, REPO, machine_lines, run_all as run_suite  # noqa: E402
from harness import allocators, cli, suite  # noqa: E402
from harness.report import fmt, fmt_ratio, md_table  # noqa: E402
from harness.summary import make_cell  # noqa: E402


def parse_args(argv):
    p = argparse.ArgumentParser(description="tally thread-scaling runner")
    p.add_argument("--threads", default="1,2,4,8",
                   help="comma list of thread counts (default 1,2,4,8)")
    p.add_argument("--reps", type=int, default=3, help="runs per cell (default 3)")
    p.add_argument("--full", action="store_true", help="the suite's longer inputs")
    p.add_argument("--workloads", help="comma list of threaded workloads (default all)")
    p.add_argument("--timeout", type=float, default=600,
                   help="seconds per run before it is killed (default 600)")
    cli.add_common(p, REPO, HERE)
    args = p.parse_args(argv)
    try:
        args.threads = [int(t) for t in args.threads.split(",") if t.strip()]
    except ValueError:
        p.error("--threads takes a comma list of numbers")
    if not args.threads or min(args.threads) < 1 or args.reps < 1:
        p.error("thread counts and --reps must be at least 1")
    return args


def run_all(args, works, allocs):
    """{(workload, threads, allocator): Cell}: bench/run.py's runs (the
    allocators alternating run by run) once per thread count."""
    cells = {}
    for t in args.threads:
        print(f"== {t} thread{'s' if t > 1 else ''}", flush=True)
        runs = run_suite(argparse.Namespace(**{**vars(args), "threads": t}), works, allocs)
        for (w_name, a_name), got in runs.items():
            metric = next(w.time_metric for w in works if w.name == w_name)
            cells[(w_name, t, a_name)] = make_cell(got, metric)
    return cells


def throughput(w, t, cell):
    """Work per second, in units of the one-thread run's work."""
    work = t if w.work_per_thread else 1
    return work / cell.time.median if cell and cell.ok and cell.time.median > 0 else None


def best_peer(cells, w, t, names, pick):
    """The lowest median of pick() among the allocators other than tally."""
    vals = [pick(cells[(w.name, t, n)]) for n in names
            if n != "tally" and (w.name, t, n) in cells and cells[(w.name, t, n)].ok]
    return min(vals) if vals else None


def _cell_text(c, pick, scale=1.0):
    if c is None:
        return "-"
    if not c.ok:
        return f"FAIL ({c.failed}/{c.runs})"
    return fmt(pick(c) / scale)


def workload_tables(cells, w, threads, names):
    time_of = lambda c: c.time.median          # noqa: E731
    rss_of = lambda c: c.rss_kib.median        # noqa: E731
    has_tally = "tally" in names
    out = [f"### {w.name}{' (work per thread)' if w.work_per_thread else ''}: {w.models}", ""]
    for title, pick, scale in (("time s", time_of, 1.0), ("peak RSS MiB", rss_of, 1024.0)):
        rows = []
        for t in threads:
            row = [str(t)] + [_cell_text(cells.get((w.name, t, n)), pick, scale) for n in names]
            if has_tally:
                c, best = cells.get((w.name, t, "tally")), best_peer(cells, w, t, names, pick)
                row.append(fmt_ratio(pick(c) / best if c and c.ok and best else None))
            rows.append(row)
        extra = ["tally / best peer"] if has_tally else []
        out += md_table([f"threads: {title}"] + names + extra, rows) + [""]
    rows = []
    for t in threads:
        row = [str(t)]
        for n in names:
            base = throughput(w, threads[0], cells.get((w.name, threads[0], n)))
            now = throughput(w, t, cells.get((w.name, t, n)))
            row.append(fmt_ratio(now / base if now and base else None))
        rows.append(row)
    out += md_table([f"threads: throughput / at {threads[0]}"] + names, rows) + [""]
    return out


def write_csv(path, cells, works, threads, names):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["workload", "threads", "allocator", "quantity", "median", "min",
                      "max", "runs_ok", "runs_failed", "error"])
        for w in works:
            for t in threads:
                for n in names:
                    c = cells.get((w.name, t, n))
                    if c is None:
                        continue
                    for q, s in (("time_s", c.time), ("peak_kib", c.rss_kib)):
                        vals = [s.median, s.lo, s.hi] if s else ["", "", ""]
                        out.writerow([w.name, t, n, q] + vals +
                                     [c.runs - c.failed, c.failed, c.error])


def replace_threads(args):
    """args as machine_lines reads them, with the thread counts as text."""
    ns = argparse.Namespace(**vars(args))
    ns.threads = ",".join(str(t) for t in args.threads)
    return ns


def main(argv):
    args = parse_args(argv)
    try:
        works = [w for w in suite.select(args.workloads) if w.threaded]
        allocs = allocators.discover(args.tally, args.alloc, args.only)
    except ValueError as exc:
        sys.exit(f"scaling.py: {exc}")
    if not works:
        sys.exit("scaling.py: none of those workloads is threaded")
    cli.require_built("scaling.py", args.bin_dir, works)

    # machine_lines reports the thread count of a suite run; say ours instead.
    header = machine_lines(replace_threads(args), allocs)
    print("\n".join(header), flush=True)
    cells = run_all(args, works, allocs)
    names = [a.name for a in allocs]
    out = ["# tally thread scaling", ""] + header + [""]
    for w in works:
        out += workload_tables(cells, w, args.threads, names)
    text = "\n".join(out) + "\n"
    print(text)
    os.makedirs(args.out_dir, exist_ok=True)
    base = os.path.join(args.out_dir, "scaling")
    with open(base + ".md", "w") as f:
        f.write(text)
    write_csv(base + ".csv", cells, works, args.threads, names)
    print(f"wrote {base}.md, {base}.csv")
    return 1 if any(not c.ok for c in cells.values()) else 0



if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
