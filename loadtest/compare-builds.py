#!/usr/bin/env python3
"""Two lockbench builds side by side: one Redis, alternating runs, medians and ratios.

Usage:
  loadtest/compare-builds.py BEFORE AFTER [--rounds N] [--baseline IMPL] [--save FILE]
      [--as BEFORE_IMPL=AFTER_IMPL] -- LOCKBENCH-ARGS...

BEFORE and AFTER are lockbench binaries (release builds of two commits). Each round runs
both with the same LOCKBENCH-ARGS (plus --json and --redis-url) on one redis-server this
script starts on a free port, alternating which goes first. For every row (implementation,
concurrency, hold, variant) it prints the median of each build's throughput over the rounds,
the after/before ratio of those medians, and the lowest and highest per-round ratio: the
run-to-run spread that a difference must exceed to mean anything.

With --baseline (an implementation both builds run unchanged, such as raw-scripts), each
row's throughput is also divided by the baseline's at the same concurrency in the same run,
and the after/before ratio of those medians is printed ("normalized"): most of the host's
drift between runs cancels. --save writes every row as JSON lines, to look at again.
--as compares an implementation under a new name (a default that became a row of its own):
the after build runs AFTER_IMPL where LOCKBENCH-ARGS say `--impl BEFORE_IMPL`, and its rows are
compared with BEFORE_IMPL's.

  loadtest/compare-builds.py ../before/target/release/lockbench target/release/lockbench \\
      --rounds 3 -- --scenario distinct-keys --duration-s 2 --rounds 1 \\
      --impl raw-scripts --impl tower-lock --impl tower-lock-nofence --impl tower-lock-service
"""
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis(directory):
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", directory],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
            return server, f"redis://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    server.kill()
    sys.exit("redis-server did not start (apt-get install redis-server)")


def row_key(row):
    return (row["impl"], row.get("variant") or ("handoff" if row.get("handoff") else ""),
            row["concurrency"], row.get("hold_ms", ""))


def throughput(row):
    return row.get("pairs_per_s") or row.get("acquisitions_per_s")


def run(binary, url, args):
    output = subprocess.run([binary, *args, "--json", "--redis-url", url],
                            check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def main():
    if "--" not in sys.argv or len(sys.argv) < 4:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    own, bench_args = sys.argv[1:split], sys.argv[split + 1:]
    before, after = own[0], own[1]
    option = lambda name, default: own[own.index(name) + 1] if name in own else default
    rounds, baseline, save = int(option("--rounds", 3)), option("--baseline", None), option("--save", None)
    renamed = option("--as", None)
    before_impl, after_impl = renamed.split("=", 1) if renamed else (None, None)
    after_args = [after_impl if renamed and arg == before_impl else arg for arg in bench_args]
    directory = tempfile.mkdtemp()
    server, url = start_redis(directory)
    results = {"before": {}, "after": {}}
    saved = open(save, "w") if save else None
    try:
        for round_no in range(rounds):
            order = [("before", before, bench_args), ("after", after, after_args)]
            for label, binary, args in order if round_no % 2 == 0 else reversed(order):
                rows = run(binary, url, args)
                for row in rows:
                    if renamed and row["impl"] == after_impl:
                        row["impl"] = before_impl
                    if baseline:
                        base = next(r for r in rows if r["impl"] == baseline
                                    and r["concurrency"] == row["concurrency"])
                        row["normalized"] = throughput(row) / throughput(base)
                    results[label].setdefault(row_key(row), []).append(row)
                    if saved:
                        print(json.dumps({"build": label, "round": round_no, **row}), file=saved)
                print(f"round {round_no + 1}/{rounds}: {label} done", file=sys.stderr)
    finally:
        server.kill()
        shutil.rmtree(directory, ignore_errors=True)
        if saved:
            saved.close()

    print(f"{'impl':<22}{'variant':>8}{'C':>5}{'H':>4}{'before/s':>12}{'after/s':>12}"
          f"{'after/before':>14}{'per-round range':>18}")
    for key in sorted(results["after"]):
        befores, afters = results["before"].get(key, []), results["after"][key]
        if not befores:
            continue
        b = statistics.median(throughput(r) for r in befores)
        a = statistics.median(throughput(r) for r in afters)
        per_round = sorted(throughput(x) / throughput(y) for x, y in zip(afters, befores))
        impl, variant, concurrency, hold = key
        print(f"{impl:<22}{variant:>8}{concurrency:>5}{hold!s:>4}{b:>12.0f}{a:>12.0f}"
              f"{a / b:>14.2f}{per_round[0]:>10.2f}–{per_round[-1]:.2f}")
        extra = []
        if baseline:
            nb = statistics.median(r["normalized"] for r in befores)
            na = statistics.median(r["normalized"] for r in afters)
            extra.append(f"vs {baseline} {nb:.2f} → {na:.2f} (normalized after/before {na / nb:.2f})")
        for field in ("round_trips_per_acquire", "utilization", "jain", "handoff_p50_us",
                      "client_cpu_us", "redis_cpu_us", "shared_wait_p99_ms",
                      "exclusive_wait_p99_ms"):
            if field in afters[0] and afters[0][field] is not None:
                mb = statistics.median(r[field] for r in befores)
                ma = statistics.median(r[field] for r in afters)
                extra.append(f"{field} {mb:.2f} → {ma:.2f}")
        if extra:
            print(f"{'':<22}  " + "; ".join(extra))


if __name__ == "__main__":
    main()
