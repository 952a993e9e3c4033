"""Reduce the runs of one workload x allocator to medians and ranges.

A cell is the summary of all repetitions of one workload under one
allocator. A cell with any failed run is reported as FAIL: a single crash or
failed self-check is an allocator bug, not noise. Ratios are always against
the "system" allocator's median, and only between two cells that passed.
"""

import math
import statistics
from dataclasses import dataclass, field
from typing import Dict, List, Optional


@dataclass
class Stat:
    median: float
    lo: float
    hi: float
    n: int

    @staticmethod
    def of(values):
        values = list(values)
        if not values:
            return None
        return Stat(statistics.median(values), min(values), max(values), len(values))


@dataclass
class Cell:
    runs: int
    failed: int
    error: str
    time: Optional[Stat]              # seconds: wall, or the time metric
    rss_kib: Optional[Stat]           # peak RSS (measure.c's peak_kib)
    wall: Optional[Stat]
    user: Optional[Stat]
    sys: Optional[Stat]
    metrics: Dict[str, Stat] = field(default_factory=dict)
    maxrss_kib: Optional[Stat] = None  # ru_maxrss alone, as runs before Dec 7 used

    @property
    def ok(self):
        return self.failed == 0 and self.time is not None


def make_cell(runs, time_metric):
    good = [r for r in runs if r.ok]
    bad = [r for r in runs if not r.ok]

    def run_time(r):
        return r.metrics.get(time_metric, r.wall_s) if time_metric else r.wall_s

    names = list(dict.fromkeys(m for r in good for m in r.metrics))  # program order
    return Cell(
        runs=len(runs), failed=len(bad), error=bad[0].error if bad else "",
        time=Stat.of(run_time(r) for r in good),
        rss_kib=Stat.of(r.peak_kib for r in good),
        maxrss_kib=Stat.of(r.maxrss_kib for r in good),
        wall=Stat.of(r.wall_s for r in good),
        user=Stat.of(r.user_s for r in good),
        sys=Stat.of(r.sys_s for r in good),
        metrics={m: Stat.of(r.metrics[m] for r in good if m in r.metrics)
                 for m in names})


def ratio(cell, base, pick):
    """pick(cell) / pick(base) when both passed and the base is not zero."""
    if not (cell and base and cell.ok and base.ok):
        return None
    a, b = pick(cell), pick(base)
    if a is None or b is None or b.median <= 0:
        return None
    return a.median / b.median


def geomean(values: List[float]):
    values = [v for v in values if v is not None and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_row(cells, workloads, allocs, pick):
    """Per allocator: (geomean of medians, geomean of ratios, rows used).

    Only rows where the allocator and the system allocator (when it is in
    the run) both passed count, so every column averages the same kind of
    rows and a failing workload does not flatter anyone."""
    out = {}
    for a in allocs:
        meds, ratios = [], []
        for w in workloads:
            c, base = cells.get((w, a)), cells.get((w, "system"))
            if not (c and c.ok and pick(c)) or (base and not base.ok):
                continue
            meds.append(pick(c).median)
            ratios.append(ratio(c, base, pick))
        out[a] = (geomean(meds), geomean(ratios), len(meds))
    return out
