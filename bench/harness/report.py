"""Turn summarised cells into the console table, markdown and CSV.

Two tables, time and peak RSS: one row per workload, for each allocator the
median and its ratio to the system malloc, and a geometric-mean row. The
markdown adds each cell's min-max and, per workload, the medians of the
programs' own "metric" lines (seed details such as ns per call or RSS per
phase). The CSV is long-format, one line per workload x allocator x
quantity, so any table can be rebuilt from it.
"""

import csv

from .summary import Stat, geomean_row, ratio

DAGGER = "\u2020"


def fmt(x):
    """Three significant digits, thousands separated; '-' for nothing."""
    if x is None:
        return "-"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a == 0:
        return "0"
    return f"{x:.3g}"


def fmt_ratio(r):
    return "n/a" if r is None else f"{r:.2f}"


def _time(c):
    return c.time


def _rss_mib(c):
    s = c.rss_kib
    return s and Stat(s.median / 1024, s.lo / 1024, s.hi / 1024, s.n)


def _maxrss(c):
    return c.maxrss_kib


RSS_TITLE = "Peak RSS (MiB: the larger of ru_maxrss and VmHWM at exit)"
QUANTITIES = [("Time (seconds)", _time), (RSS_TITLE, _rss_mib)]


def maxrss_line(cells, works, names):
    """The peak table's geometric means as ru_maxrss alone would give them
    (the measure of the runs before Dec 7, 2026), so the two can be set
    side by side: ru_maxrss misses up to 31 pages a CPU (bench/measure.c)."""
    geo = geomean_row(cells, [w.name for w in works], names, _maxrss)
    parts = [f"{n} {fmt_ratio(geo[n][1])}" for n in names
             if n != "system" and geo[n][1] is not None]
    if not parts or "system" not in names:
        return None
    return ("By ru_maxrss alone, the geometric means of the peak ratios "
            "would be: " + ", ".join(parts) + ".")


def _label(w):
    return w.name + (DAGGER if w.time_metric else "")


# ---- console -------------------------------------------------------------

def console(cells, works, allocs):
    lines = []
    names = [a.name for a in allocs]
    for title, pick in QUANTITIES:
        lines.append(f"\n{title}: median over runs (ratio to system)")
        lines.append(f"{'workload':<16}" + "".join(f"{n:>18}" for n in names))
        for w in works:
            row = f"{_label(w):<16}"
            for n in names:
                c = cells.get((w.name, n))
                if c is None:
                    row += f"{'-':>18}"
                elif not c.ok:
                    row += f"{'FAIL':>18}"
                else:
                    r = ratio(c, cells.get((w.name, "system")), pick)
                    row += f"{fmt(pick(c).median) + ' (' + fmt_ratio(r) + ')':>18}"
            lines.append(row)
        geo = geomean_row(cells, [w.name for w in works], names, pick)
        row = f"{'geomean':<16}"
        for n in names:
            g, r, _ = geo[n]
            row += f"{fmt(g) + ' (' + fmt_ratio(r) + ')':>18}"
        lines.append(row)
        partial = [f"{n} {geo[n][2]}" for n in names if geo[n][2] != len(works)]
        if partial:
            lines.append(f"  (geomean over fewer than {len(works)} rows, where "
                         f"the allocator and system passed: {', '.join(partial)})")
        alone = maxrss_line(cells, works, names) if title == RSS_TITLE else None
        if alone:
            lines.append("  " + alone)
    failures = [(w.name, n, cells[(w.name, n)]) for w in works for n in names
                if (w.name, n) in cells and not cells[(w.name, n)].ok]
    for wname, n, c in failures:
        lines.append(f"FAIL {wname} / {n}: {c.failed} of {c.runs} runs: {c.error}")
    if any(w.time_metric for w in works):
        lines.append(f"{DAGGER} time from the program's bench_time_s metric, "
                     "not wall time (see docs/benchmarks.md)")
    return "\n".join(lines)


# ---- markdown -----------------------------------------------------------

def md_table(header, rows):
    """A markdown table: a header row, right-aligned columns after the first."""
    out = ["| " + " | ".join(header) + " |",
           "|---|" + "---:|" * (len(header) - 1)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def _md_cell(stat, c):
    if c is None:
        return "-"
    if not c.ok:
        return f"FAIL ({c.failed}/{c.runs})"
    if stat.n > 1:
        return f"{fmt(stat.median)} ({fmt(stat.lo)}-{fmt(stat.hi)})"
    return fmt(stat.median)


def _md_quantity(cells, works, names, title, pick):
    others = [n for n in names if n != "system"]
    ratios = [f"{n}/system" for n in others] if "system" in names else []
    rows = []
    for w in works:
        row = [_label(w)]
        for n in names:
            c = cells.get((w.name, n))
            row.append(_md_cell(pick(c) if c and c.ok else None, c))
        base = cells.get((w.name, "system"))
        row += [fmt_ratio(ratio(cells.get((w.name, n)), base, pick))
                for n in others] if ratios else []
        rows.append(row)
    geo = geomean_row(cells, [w.name for w in works], names, pick)
    row = ["**geometric mean**"] + [fmt(geo[n][0]) + (f" ({geo[n][2]} rows)"
           if geo[n][2] != len(works) else "") for n in names]
    row += [fmt_ratio(geo[n][1]) for n in others] if ratios else []
    rows.append(row)
    return [f"### {title}", "",
            "Median (min-max) of the runs; ratios are allocator / system, "
            "below 1 is better.", ""] + md_table(["workload"] + names + ratios, rows)


def _md_metrics(cells, work, names):
    metrics = list(dict.fromkeys(m for n in names if (work.name, n) in cells
                                 for m in cells[(work.name, n)].metrics))
    if not metrics:
        return []
    others = [n for n in names if n != "system"] if "system" in names else []
    rows = []
    for m in metrics:
        row, vals = [m], {}
        for n in names:
            c = cells.get((work.name, n))
            s = c.metrics.get(m) if c else None
            vals[n] = s.median if (s and c.ok) else None
            row.append("FAIL" if c and not c.ok else fmt(vals[n]))
        base = vals.get("system")
        row += [fmt_ratio(vals[n] / base if vals[n] is not None and base else None)
                for n in others]
        rows.append(row)
    hdr = ["metric"] + names + [f"{n}/system" for n in others]
    return [f"#### {work.name}: {work.models}", ""] + md_table(hdr, rows) + [""]


def markdown(cells, works, allocs, header_lines):
    names = [a.name for a in allocs]
    out = ["# tally benchmark results", ""] + header_lines + [""]
    for title, pick in QUANTITIES:
        out += _md_quantity(cells, works, names, title, pick) + [""]
        alone = maxrss_line(cells, works, names) if title == RSS_TITLE else None
        if alone:
            out += [alone, ""]
    if any(w.time_metric for w in works):
        out += [f"{DAGGER} time is the program's `bench_time_s` metric, not the "
                "wall time: larson's throughput as seconds per 10M replacements; "
                "rssfoot's churn without its idle sleep.", ""]
    out += ["### Workload metrics (medians of the programs' own metric lines)", ""]
    for w in works:
        out += _md_metrics(cells, w, names)
    return "\n".join(out) + "\n"


# ---- csv --------------------------------------------------------------

def write_csv(path, cells, works, allocs):
    with open(path, "w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["workload", "allocator", "quantity", "median", "min", "max",
                      "runs_ok", "runs_failed", "error"])
        for w in works:
            for a in allocs:
                c = cells.get((w.name, a.name))
                if c is None:
                    continue
                rows = [("time_s", c.time), ("peak_kib", c.rss_kib),
                        ("maxrss_kib", c.maxrss_kib),
                        ("wall_s", c.wall), ("user_s", c.user), ("sys_s", c.sys)]
                rows += [("metric:" + m, s) for m, s in c.metrics.items()]
                for q, s in rows:
                    vals = [s.median, s.lo, s.hi] if s else ["", "", ""]
                    out.writerow([w.name, a.name, q] + vals +
                                 [c.runs - c.failed, c.failed, c.error])
