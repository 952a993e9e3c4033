"""Draw latest.svg: per workload, one bar per allocator for the time ratio
and the peak-RSS ratio to the system malloc, on a log axis.

Bars grow from the 1.0 line: left is better than glibc, right is worse.
A log axis because ratios span 0.1 to several hundred (realloc-m), and a
log axis keeps 0.5 and 2 equally far from 1. Values beyond the axis are
clipped and labelled with their number. Hand-written SVG, no libraries, so
any browser shows it.
"""

import math
from xml.sax.saxutils import escape

from .summary import ratio

COLORS = ["#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd",
          "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]
LABEL_W, PANEL_W, GAP, BAR_H, TOP = 150, 380, 70, 9, 95


def _num(v):
    """Bar label: two significant digits, no exponent."""
    return f"{v:.0f}" if v >= 10 else f"{v:.2g}"


def _axis(values):
    """Log axis bounds: powers of ten covering 1 and the finite ratios."""
    finite = [v for v in values if v]
    lo = min([0.5] + finite)
    hi = max([2.0] + finite)
    return (10 ** math.floor(math.log10(max(lo, 1e-3))),
            10 ** math.ceil(math.log10(min(hi, 1e4))))


def _x(v, lo, hi, x0):
    v = min(max(v, lo), hi)
    return x0 + PANEL_W * (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))


def _panel(out, title, x0, rows, lo, hi, height, names):
    out.append(f'<text x="{x0 + PANEL_W / 2}" y="{TOP - 28}" text-anchor="middle" '
               f'font-weight="bold">{escape(title)}</text>')
    decade = lo
    while decade <= hi * 1.0001:
        for m in (1, 2, 5):
            v = decade * m
            if v > hi * 1.0001:
                break
            x = _x(v, lo, hi, x0)
            stroke = "#888" if v == 1 else "#ddd"
            out.append(f'<line x1="{x:.1f}" y1="{TOP - 12}" x2="{x:.1f}" '
                       f'y2="{height - 20}" stroke="{stroke}"/>')
            if m == 1 or (hi / lo) <= 100:
                out.append(f'<text x="{x:.1f}" y="{TOP - 14}" text-anchor="middle" '
                           f'font-size="10">{v:g}</text>')
        decade *= 10
    one = _x(1, lo, hi, x0)
    for y, vals in rows:
        for i, n in enumerate(names):
            v = vals.get(n, "missing")
            by = y + i * BAR_H
            if v == "missing":
                continue
            if v is None:
                out.append(f'<text x="{one + 3:.1f}" y="{by + BAR_H - 1}" '
                           f'font-size="9" fill="{COLORS[i % len(COLORS)]}">FAIL</text>')
                continue
            x = _x(v, lo, hi, x0)
            left, width = min(x, one), max(abs(x - one), 1)
            out.append(f'<rect x="{left:.1f}" y="{by}" width="{width:.1f}" '
                       f'height="{BAR_H - 1}" fill="{COLORS[i % len(COLORS)]}">'
                       f'<title>{escape(n)}: {v:.3g}</title></rect>')
            tx = x + 3 if v >= 1 else x - 3
            anchor = "start" if v >= 1 else "end"
            out.append(f'<text x="{tx:.1f}" y="{by + BAR_H - 1}" font-size="8" '
                       f'text-anchor="{anchor}">{_num(v)}</text>')


def svg(cells, works, allocs, subtitle):
    names = [a.name for a in allocs if a.name != "system"]
    group_h = BAR_H * max(len(names), 1) + 8
    height = TOP + group_h * len(works) + 30
    width = LABEL_W + 2 * PANEL_W + GAP + 40
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="8" y="16" font-weight="bold">tally benchmarks: ratio to '
           f'system malloc (log scale, left of 1 = better)</text>',
           f'<text x="8" y="30" font-size="10">{escape(subtitle)}</text>']
    for i, n in enumerate(names):
        lx = LABEL_W + i * 90
        out.append(f'<rect x="{lx}" y="42" width="10" height="10" '
                   f'fill="{COLORS[i % len(COLORS)]}"/>')
        out.append(f'<text x="{lx + 14}" y="51">{escape(n)}</text>')
    if "system" not in {a.name for a in allocs}:
        out.append(f'<text x="8" y="{TOP}">system malloc not in this run: no ratios</text>')
    for k, (title, pick) in enumerate([("time", lambda c: c.time),
                                       ("peak RSS", lambda c: c.rss_kib)]):
        rows, values = [], []
        for j, w in enumerate(works):
            base = cells.get((w.name, "system"))
            vals = {}
            for n in names:
                c = cells.get((w.name, n))
                if c is not None:
                    vals[n] = ratio(c, base, pick)
            values += vals.values()
            rows.append((TOP + j * group_h, vals))
        lo, hi = _axis(values)
        _panel(out, title, LABEL_W + k * (PANEL_W + GAP), rows, lo, hi, height, names)
    for j, w in enumerate(works):
        y = TOP + j * group_h + group_h / 2
        out.append(f'<text x="{LABEL_W - 8}" y="{y:.0f}" text-anchor="end">'
                   f'{escape(w.name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"
