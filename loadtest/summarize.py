"""Merges the oha runs of loadtest/run.sh into one table and checks the coupon invariant.

Usage: summarize.py WORKDIR OUTDIR REPLICAS STARTED FINISHED STOCK USERS [off]
Prints the table and writes it to OUTDIR/summary.txt, with the chart OUTDIR/claims.svg (latency
histogram and answers by status). Exit status 1 when the coupon was oversold or claimed twice
by one user.
"""
import collections
import json
import os
import sqlite3
import sys

import chart_svg

work, out_dir, replicas = sys.argv[1], sys.argv[2], int(sys.argv[3])
started, finished = float(sys.argv[4]), float(sys.argv[5])
stock, users = int(sys.argv[6]), int(sys.argv[7])
lock = "off (control)" if len(sys.argv) > 8 and sys.argv[8] == "off" else "on"

durations, statuses, errors = [], collections.Counter(), collections.Counter()
for r in range(replicas):
    with sqlite3.connect(f"{work}/oha-{r}.db") as db:
        for duration, status in db.execute("SELECT duration, status FROM oha"):
            durations.append(duration)
            statuses[status] += 1
    with open(f"{work}/oha-{r}.json") as f:
        errors.update(json.load(f).get("errorDistribution", {}))
with open(f"{work}/coupon.json") as f:
    coupon = json.load(f)

durations.sort()


def percentile(p):
    return durations[min(len(durations) - 1, int(p * len(durations)))] * 1000 if durations else float("nan")


wall = finished - started
answered = len(durations)
expected_claims = min(stock, users)
holds = coupon["oversold"] == 0 and coupon["duplicate_claims"] == 0 and coupon["claimed"] == expected_claims
rows = [
    ("lock", lock),
    ("requests answered", f"{answered}"),
    ("connection errors", f"{sum(errors.values())}" + (f" {dict(errors)}" if errors else "")),
] + [(f"  status {status}", f"{count}") for status, count in sorted(statuses.items())] + [
    ("throughput", f"{answered / wall:,.0f} req/s over {wall:.2f} s"),
    ("latency p50 / p99", f"{percentile(0.50):.2f} ms / {percentile(0.99):.2f} ms"),
    ("stock / remaining", f"{coupon['supply']} / {coupon['remaining']}"),
    ("claimed", f"{coupon['claimed']} (expected min(stock, users) = {expected_claims})"),
    ("users holding it twice", f"{coupon['duplicate_claims']}"),
    ("oversold", f"{coupon['oversold']}"),
    ("invariant", "HOLDS" if holds else "VIOLATED"),
]
width = max(len(name) for name, _ in rows)
table = "\n".join(f"  {name:<{width}}  {value}" for name, value in rows)
print()
print(table)
os.makedirs(out_dir, exist_ok=True)
with open(os.path.join(out_dir, "summary.txt"), "w") as f:
    f.write(table + "\n")
answers = collections.Counter({str(status): count for status, count in statuses.items()})
if errors:
    answers["error"] = sum(errors.values())
chart = os.path.join(out_dir, "claims.svg")
chart_svg.write(chart, f"claim storm: {answered:,} answers over {replicas} replicas, lock {lock}",
                [d * 1000 for d in durations], answers, percentile(0.50), percentile(0.99))
print(f"\n  summary and chart: {out_dir}/summary.txt, {chart}\n")
sys.exit(0 if holds else 1)
