"""What the runners (run.py, scaling.py, instructions.py) share: their
common options and the check that the programs they run are built."""

import os
import sys


def add_allocators(parser):
    """--tally (the library measured as "tally": make passes the one it
    built), --only and --alloc. Without --tally, args.tally is None and
    allocators.discover takes build/libtally.so when it exists."""
    parser.add_argument("--tally", metavar="PATH", help="tally's .so (default "
                        "build/libtally.so when built; a PATH given must exist)")
    parser.add_argument("--only", help="comma list of allocators to run")
    parser.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH",
                        help="add an allocator .so (repeatable); also BENCH_ALLOCATORS")


def add_common(parser, repo, here):
    """The allocator options, --bin-dir and --out-dir."""
    add_allocators(parser)
    parser.add_argument("--bin-dir", default=os.path.join(repo, "build", "bench"))
    parser.add_argument("--out-dir", default=os.path.join(here, "results"))


def require_built(runner, bin_dir, works):
    """Exits with a message when a workload program or `measure` is missing."""
    missing = sorted({p for p in [w.prog for w in works] + ["measure"]
                      if not os.path.isfile(os.path.join(bin_dir, p))})
    if missing:
        sys.exit(f"{runner}: not built: {', '.join(missing)} (run make bench-build)")
