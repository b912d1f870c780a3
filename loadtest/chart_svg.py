"""The chart loadtest/run.sh writes next to its summary: the latency histogram of every answer
and the answers by status, as one self-contained SVG (no plotting library needed).
"""
import html
import math

WIDTH, HEIGHT = 900, 380
STATUS_COLORS = {"2": "#2e7d32", "4": "#ef6c00", "5": "#c62828"}


def _histogram(durations_ms, bins=40):
    """Counts of `durations_ms` in `bins` equal buckets up to the 99.9th percentile."""
    ordered = sorted(durations_ms)
    top = ordered[min(len(ordered) - 1, int(0.999 * len(ordered)))] if ordered else 1.0
    top = max(top, 1e-3)
    width = top / bins
    counts = [0] * bins
    for value in ordered:
        counts[min(bins - 1, int(value / width))] += 1
    return counts, width


def _nice_step(top, ticks=5):
    raw = top / ticks
    magnitude = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)


def write(path, title, durations_ms, statuses, p50_ms, p99_ms):
    """Writes the chart of `durations_ms` (every answer's latency) and `statuses` (a Counter
    of answers by status, connection errors under "error") to `path`."""
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
           f'<text x="{WIDTH / 2}" y="22" text-anchor="middle" font-size="16">{html.escape(title)}</text>']
    # Left: latency histogram.
    x0, y0, w, h = 60, 50, 520, 270
    counts, bucket = _histogram(durations_ms)
    top = max(counts) if counts and max(counts) > 0 else 1
    step = _nice_step(top)
    out.append(f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle">latency of every answer '
               f'(p50 {p50_ms:.1f} ms, p99 {p99_ms:.1f} ms)</text>')
    tick = 0
    while tick <= top:
        y = y0 + h - h * tick / top
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
        tick += step
    bar_w = w / max(1, len(counts))
    for i, count in enumerate(counts):
        bar_h = h * count / top
        out.append(f'<rect x="{x0 + i * bar_w + 1:.1f}" y="{y0 + h - bar_h:.1f}" width="{bar_w - 2:.1f}" '
                   f'height="{bar_h:.1f}" fill="#3461d1"/>')
    for i in range(0, len(counts) + 1, 8):
        x = x0 + i * bar_w
        out.append(f'<text x="{x:.1f}" y="{y0 + h + 16}" text-anchor="middle">{i * bucket:.1f}</text>')
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 34}" text-anchor="middle">ms</text>')
    for p, label in ((p50_ms, "p50"), (p99_ms, "p99")):
        if bucket > 0 and p <= bucket * len(counts):
            x = x0 + w * p / (bucket * len(counts))
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y0 + h}" stroke="#c62828" '
                       f'stroke-dasharray="4 3"/><text x="{x + 3:.1f}" y="{y0 + 12}" fill="#c62828">{label}</text>')
    out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{y0 + h}" y2="{y0 + h}" stroke="black"/>')
    # Right: answers by status.
    x1, w1 = 650, 220
    answers = sorted(statuses.items(), key=lambda item: str(item[0]))
    most = max([count for _, count in answers] + [1])
    out.append(f'<text x="{x1 + w1 / 2}" y="{y0 - 8}" text-anchor="middle">answers by status</text>')
    row_h = min(40, h / max(1, len(answers)))
    for i, (status, count) in enumerate(answers):
        y = y0 + i * row_h
        color = STATUS_COLORS.get(str(status)[0], "#777")
        bar = (w1 - 60) * count / most
        out.append(f'<text x="{x1 - 6}" y="{y + row_h / 2 + 4:.1f}" text-anchor="end">{html.escape(str(status))}</text>')
        out.append(f'<rect x="{x1}" y="{y + 4:.1f}" width="{bar:.1f}" height="{row_h - 8:.1f}" fill="{color}"/>')
        out.append(f'<text x="{x1 + bar + 4:.1f}" y="{y + row_h / 2 + 4:.1f}">{count:,}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
