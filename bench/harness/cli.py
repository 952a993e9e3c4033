"""Command-line options that every runner (run.py, scaling.py) takes."""

import os


def add_common(parser, repo, here):
    """--only, --alloc, --bin-dir and --out-dir."""
    parser.add_argument("--only", help="comma list of allocators to run")
    parser.add_argument("--alloc", action="append", default=[], metavar="NAME=PATH",
                        help="add an allocator .so (repeatable); also BENCH_ALLOCATORS")
    parser.add_argument("--bin-dir", default=os.path.join(repo, "build", "bench"))
    parser.add_argument("--out-dir", default=os.path.join(here, "results"))
