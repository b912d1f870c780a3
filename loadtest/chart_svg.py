"""The chart loadtest/run.sh writes next to its summary: the latency histogram of every answer
and the answers by status, as one self-contained SVG (no plotting library needed).
"""
import html
import math

WIDTH, HEIGHT = 900, 380
STATUS_COLORS = {"2": "#2e7d32", "4": "#ef6c00", "5": "#c62828"}


def _histogram(durations_ms, bins=40):
    """Counts of `durations_ms` in `bins` buckets spaced evenly on a log scale, from the
    fastest answer to the 99.9th percentile (slower ones in the last): (counts, low, high)."""
    ordered = sorted(max(value, 1e-3) for value in durations_ms)
    if not ordered:
        return [0] * bins, 0.1, 1.0
    low = ordered[0]
    high = max(ordered[min(len(ordered) - 1, int(0.999 * len(ordered)))], low * 10)
    span = math.log10(high / low)
    counts = [0] * bins
    for value in ordered:
        at = int(bins * math.log10(value / low) / span) if value > low else 0
        counts[min(bins - 1, at)] += 1
    return counts, low, high


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
    counts, low, high = _histogram(durations_ms)
    top = max(counts) if max(counts) > 0 else 1
    step = _nice_step(top)
    x_of = lambda ms: x0 + w * math.log10(max(ms, low) / low) / math.log10(high / low)
    out.append(f'<text x="{x0 + w / 2}" y="{y0 - 8}" text-anchor="middle">latency of every answer '
               f'(p50 {p50_ms:.1f} ms, p99 {p99_ms:.1f} ms)</text>')
    tick = 0
    while tick <= top:
        y = y0 + h - h * tick / top
        out.append(f'<line x1="{x0}" x2="{x0 + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eee"/>')
        out.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:g}</text>')
        tick += step
    bar_w = w / len(counts)
    for i, count in enumerate(counts):
        bar_h = h * count / top
        out.append(f'<rect x="{x0 + i * bar_w + 1:.1f}" y="{y0 + h - bar_h:.1f}" width="{bar_w - 2:.1f}" '
                   f'height="{bar_h:.1f}" fill="#3461d1"/>')
    decade = 10 ** math.floor(math.log10(low))
    while decade <= high:
        if decade >= low:
            x = x_of(decade)
            out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0 + h}" y2="{y0 + h + 5}" stroke="black"/>')
            out.append(f'<text x="{x:.1f}" y="{y0 + h + 18}" text-anchor="middle">{decade:g}</text>')
        decade *= 10
    out.append(f'<text x="{x0 + w / 2}" y="{y0 + h + 36}" text-anchor="middle">ms (log scale)</text>')
    for p, label in ((p50_ms, "p50"), (p99_ms, "p99")):
        if low <= p <= high:
            x = x_of(p)
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
