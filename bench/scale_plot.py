#!/usr/bin/env python3
"""Draws bench/scale's start-up curve as an SVG (standard library only).

    bench/scale_plot.py scale.tsv [more.tsv ...] > docs/scale.svg

Both axes are logarithmic: records (x) against seconds from spawn to
/readyz 200 (y), one line per store and start (after a clean stop, after
a SIGKILL), and the 2 s target as a dashed line.
"""

import csv
import math
import sys

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 190, 30, 50
X_DECADES = (3, 7)
Y_DECADES = (-1, 2)
SERIES = [
    ("embedded", "ready_clean_s", "embedded, after a clean stop", "#1f77b4", ""),
    ("embedded", "ready_after_sigkill_s", "embedded, after SIGKILL", "#1f77b4", "4 3"),
    ("redis", "ready_clean_s", "Redis, after a clean stop", "#d62728", ""),
    ("redis", "ready_after_sigkill_s", "Redis, after SIGKILL", "#d62728", "4 3"),
]


def x_of(records):
    low, high = X_DECADES
    span = WIDTH - LEFT - RIGHT
    return LEFT + (math.log10(records) - low) / (high - low) * span


def y_of(seconds):
    low, high = Y_DECADES
    span = HEIGHT - TOP - BOTTOM
    return HEIGHT - BOTTOM - (math.log10(seconds) - low) / (high - low) * span


def rows(paths):
    found = []
    for path in paths:
        with open(path, newline="") as handle:
            found.extend(csv.DictReader(handle, delimiter="\t"))
    return found


def main():
    data = rows(sys.argv[1:])
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
    ]
    for decade in range(X_DECADES[0], X_DECADES[1] + 1):
        x = x_of(10**decade)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{HEIGHT - BOTTOM}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">10^{decade}</text>')
    for decade in range(Y_DECADES[0], Y_DECADES[1] + 1):
        y = y_of(10**decade)
        out.append(f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{LEFT - 8}" y="{y + 4:.1f}" text-anchor="end">{10**decade:g} s</text>')
    target = y_of(2)
    out.append(
        f'<line x1="{LEFT}" y1="{target:.1f}" x2="{WIDTH - RIGHT}" y2="{target:.1f}" '
        'stroke="#2ca02c" stroke-dasharray="6 4"/>'
    )
    out.append(f'<text x="{WIDTH - RIGHT + 6}" y="{target + 4:.1f}" fill="#2ca02c">target 2 s</text>')
    out.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2:.0f}" y="{HEIGHT - 12}" text-anchor="middle">'
        "completed records in the store</text>"
    )
    out.append(f'<text x="{LEFT}" y="{TOP - 10}">spawn to /readyz 200</text>')
    for rank, (store, column, label, colour, dash) in enumerate(SERIES):
        points = sorted(
            (int(row["records"]), float(row[column]))
            for row in data
            if row["store"] == store and row.get(column, "-") not in ("", "-")
        )
        if not points:
            continue
        path = " ".join(f"{x_of(n):.1f},{y_of(max(s, 0.1)):.1f}" for n, s in points)
        out.append(
            f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2" '
            f'stroke-dasharray="{dash}"/>'
        )
        for n, s in points:
            out.append(f'<circle cx="{x_of(n):.1f}" cy="{y_of(max(s, 0.1)):.1f}" r="3" fill="{colour}"/>')
        y = TOP + 20 + 18 * rank
        out.append(
            f'<line x1="{WIDTH - RIGHT + 6}" y1="{y}" x2="{WIDTH - RIGHT + 26}" y2="{y}" '
            f'stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/>'
        )
        out.append(f'<text x="{WIDTH - RIGHT + 30}" y="{y + 4}" font-size="10">{label}</text>')
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
