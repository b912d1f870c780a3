"""Merges the oha runs of loadtest/run.sh into one table and checks the coupon invariant.

Usage: summarize.py WORKDIR REPLICAS STARTED FINISHED STOCK USERS [off]
Exit status 1 when the coupon was oversold or claimed twice by one user.
"""
import collections
import json
import sqlite3
import sys

work, replicas = sys.argv[1], int(sys.argv[2])
started, finished = float(sys.argv[3]), float(sys.argv[4])
stock, users = int(sys.argv[5]), int(sys.argv[6])
lock = "off (control)" if len(sys.argv) > 7 and sys.argv[7] == "off" else "on"

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
print()
for name, value in rows:
    print(f"  {name:<{width}}  {value}")
print()
sys.exit(0 if holds else 1)
