"""Which allocators a run compares, and where their shared objects live.

An allocator is a name plus the .so that LD_PRELOAD puts in front of the
system malloc; "system" has no .so (glibc's malloc as linked). tally is
build/libtally.so when it has been built; the peers are the Debian packages
libjemalloc2, libmimalloc2.0 and libtcmalloc-minimal4 when installed. More
come from BENCH_ALLOCATORS=name=/path.so,... or --alloc name=/path.so.
A spec may end in @OPTIONS, run as TALLY_OPTIONS (semicolons for commas):
--alloc tally-secure=build/libtally.so@secure=1 measures tally's secure mode.
"""

import os
import sys
import subprocess
from dataclasses import dataclass
from typing import Optional

LIBDIR = "/usr/lib/x86_64-linux-gnu"
DEFAULT_TALLY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "build", "libtally.so")

# name -> candidate paths, first existing wins (Debian's names, newest first)
PEERS = {
    "jemalloc": ["libjemalloc.so.2"],
    "mimalloc": ["libmimalloc.so.2", "libmimalloc.so.2.0", "libmimalloc.so"],
    "tcmalloc": ["libtcmalloc_minimal.so.4"],
}


@dataclass
class Allocator:
    name: str
    path: Optional[str]  # None: the system malloc, nothing preloaded
    options: Optional[str] = None  # TALLY_OPTIONS for this allocator's runs



def parse_spec(spec):
    """'name=/path.so[@opts]' -> Allocator; raises ValueError on a bad spec."""
    name, sep, path = spec.partition("=")
    path, _, options = path.partition("@")
    name, path = name.strip(), path.strip()
    if not sep or not name or not path:
        raise ValueError(f"allocator spec '{spec}' is not name=/path.so")
    if not os.path.isfile(path):
        raise ValueError(f"allocator {name}: no file {path}")
    return Allocator(name, os.path.abspath(path), options.replace(";", ",") or None)


def discover(tally, extra_specs, only):
    """All allocators of this run, in table order: tally, system, peers.

    tally is the library at path `tally`, which must exist: a run asked to
    measure a library that is not there must not quietly leave it out. With
    `tally` None it is build/libtally.so, when that has been built."""
    found = []
    if tally is not None and not os.path.isfile(tally):
        raise ValueError(f"--tally: no file {tally}")
    tally = tally or DEFAULT_TALLY
    if os.path.isfile(tally):
        found.append(Allocator("tally", os.path.abspath(tally)))
    found.append(Allocator("system", None))
    for name, candidates in PEERS.items():
        for c in candidates:
            path = os.path.join(LIBDIR, c)
            if os.path.isfile(path):
                found.append(Allocator(name, path))
                break
    specs = [s for s in os.environ.get("BENCH_ALLOCATORS", "").split(",") if s.strip()]
    for spec in specs + list(extra_specs):
        extra = parse_spec(spec)
        found = [a for a in found if a.name != extra.name] + [extra]
    if only:
        wanted = [n.strip() for n in only.split(",") if n.strip()]
        missing = [n for n in wanted if n not in {a.name for a in found}]
        if missing:
            raise ValueError(f"--only: not available: {', '.join(missing)}")
        found = [a for a in found if a.name in wanted]
    return found


def describe(alloc):
    """A one-line description: path and, for a Debian package, its version."""
    if alloc.options:
        return f"{alloc.path} with TALLY_OPTIONS={alloc.options}"
    if alloc.path is None:
        return f"glibc {os.confstr('CS_GNU_LIBC_VERSION').split()[-1]} (no preload)"
    try:
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(alloc.path)],
                               capture_output=True, text=True, timeout=10)
        pkg = owner.stdout.split(":")[0].strip() if owner.returncode == 0 else ""
        if pkg:
            ver = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg],
                                 capture_output=True, text=True, timeout=10)
            return f"{alloc.path} ({pkg} {ver.stdout.strip()})"
    except (OSError, subprocess.SubprocessError):
        pass
    return alloc.path


def from_args(tool, args):
    """discover() for a command line with --tally, --alloc and --only; a
    bad choice ends the program with `tool: why`."""
    try:
        return discover(args.tally, args.alloc, args.only)
    except ValueError as exc:
        sys.exit(f"{tool}: {exc}")
