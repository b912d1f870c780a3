#!/usr/bin/env bash
# What the lock adds to an HTTP request: the demo with --work-ms 0, claims on distinct coupons
# (no contention), with the lock vs --no-lock, same oha settings, alternating, in one run.
#
#   loadtest/bench-http.sh                       # 64 and 1 connections, 10 s each, 3 rounds
#   loadtest/bench-http.sh --duration 5 --rounds 2 --connections "64 1"
#   loadtest/bench-http.sh --workload not-found  # claims on coupons that do not exist
#   loadtest/bench-http.sh --before ../before/target/release/demo-coupon-service
#   loadtest/bench-http.sh --workload hot --connections "48 6"
#
# Workloads: `claim` (default) claims a random coupon of a pool of 20,000, created up front
# with stock enough for every run, each request as another user: the whole claim runs (read
# the stock, look for the user's claim, write). `not-found` claims random ids that are no
# coupon: the handler reads once and answers 404, the lightest request a lock can guard.
# `hot` claims one coupon through three replicas sharing Redis (the connections split over
# them, one oha each), with locks handed on within a replica (`cohort`: --lock-local-run 8,
# the default) and without (`store`: --lock-local-run 1, every lock released in Redis).
#
# Starts its own redis-server (or uses REDIS_URL) and one demo replica per mode (three for
# `hot`); prints throughput and p50/p99 for each, the lock/no-lock throughput ratio and the
# added latency (`hot`: cohort/store, p99 the worst replica's). --before BIN adds a third
# mode, `before`: BIN (the demo built from another commit) with the lock, in the same rounds,
# and prints this build's throughput and latency against it.
set -euo pipefail

duration=10 rounds=3 connections="64 1" workload=claim before=""
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) duration=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --before) before=$(realpath "$2"); shift 2 ;;
    -h|--help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
case "$workload" in
  claim|not-found|hot) ;;
  *) echo "unknown workload $workload (claim, not-found or hot)" >&2; exit 2 ;;
esac

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_until() {
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "timed out waiting for: $*" >&2; return 1; }
    sleep 0.05
  done
}

command -v oha >/dev/null || { echo "installing oha (cargo install oha --locked)"; cargo install oha --locked; }
echo "building the demo (release)"
cargo build --release --quiet -p demo-coupon-service --manifest-path "$root/Cargo.toml"

if [ -z "${REDIS_URL:-}" ]; then
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/redis.log" 2>&1 &
  pids+=($!)
  REDIS_URL="redis://127.0.0.1:$redis_port"
  wait_until 10 redis-cli -p "$redis_port" ping
fi

start_replica() { # name, binary, port, arguments...
  local name=$1 bin=$2 port=$3; shift 3
  RUST_LOG=warn "$bin" --listen "127.0.0.1:$port" --work-ms 0 "$@" >"$work/$name.log" 2>&1 &
  pids+=($!)
  wait_until 20 curl -fsS "http://127.0.0.1:$port/healthz"
}

if [ "$workload" = hot ]; then
  # One coupon per mode, claimed through three replicas of that mode; each request as a user
  # drawn from 500,000 (a user claiming twice is answered 409 after the same locked reads).
  declare -A url replicas=([cohort]="--lock-local-run 8" [store]="--lock-local-run 1")
  modes=(cohort store)
  for mode in "${modes[@]}"; do
    for replica in 0 1 2; do
      port=$(free_port)
      # shellcheck disable=SC2086 # the mode's options are words
      start_replica "$mode-$replica" "$root/target/release/demo-coupon-service" "$port" \
        --redis-url "$REDIS_URL" --no-fence ${replicas[$mode]}
      url[$mode-$replica]="http://127.0.0.1:$port"
    done
    curl -fsS -X PUT "${url[$mode-0]}/coupons/hot-$mode" -H 'content-type: application/json' \
      -d '{"stock":1000000000}' >/dev/null
  done
  python3 -c 'import sys; open(sys.argv[1], "w").writelines(f"{{\"user_id\":\"user-{n}\"}}\n" for n in range(500000))' "$work/users.txt"
  for c in $connections; do
    for round in $(seq 1 "$rounds"); do
      order=("${modes[@]}"); [ $((round % 2)) -eq 0 ] && order=(store cohort)
      for mode in "${order[@]}"; do
        loads=()
        for replica in 0 1 2; do
          oha -z "${duration}s" -c "$(( (c + 2 - replica) / 3 ))" -m POST -T application/json \
            -Z "$work/users.txt" --no-tui --output-format json \
            -o "$work/$mode-$c-$round-$replica.json" "${url[$mode-$replica]}/coupons/hot-$mode/claim" 2>/dev/null &
          loads+=($!)
        done
        wait "${loads[@]}"
        sleep 0.5
      done
    done
  done
  python3 - "$work" "$rounds" "$connections" <<'PY'
import json, statistics, sys
work, rounds, connections = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
print(f"\n  one hot coupon, three replicas sharing Redis (median of {rounds} rounds; p99: the worst replica's)")
print(f"  {'conns':>5} {'mode':<7} {'claims/s':>9} {'p50 ms':>8} {'p99 ms':>8}   statuses")
for c in connections:
    figures = {}
    for mode in ("cohort", "store"):
        rps, p50, p99, codes = [], [], [], {}
        for r in range(1, rounds + 1):
            runs = [json.load(open(f"{work}/{mode}-{c}-{r}-{i}.json")) for i in range(3)]
            rps.append(sum(run["summary"]["requestsPerSec"] for run in runs))
            p50.append(statistics.median(run["latencyPercentiles"]["p50"] for run in runs) * 1000)
            p99.append(max(run["latencyPercentiles"]["p99"] for run in runs) * 1000)
            for run in runs:
                for code, n in run["statusCodeDistribution"].items():
                    codes[code] = codes.get(code, 0) + n
        figures[mode] = (statistics.median(rps), statistics.median(p50), statistics.median(p99))
        print(f"  {c:>5} {mode:<7} {figures[mode][0]:>9.0f} {figures[mode][1]:>8.2f} {figures[mode][2]:>8.2f}   {codes}")
    (c_rps, _, c_p99), (s_rps, _, s_p99) = figures["cohort"], figures["store"]
    print(f"  {c:>5} cohort/store claims/s {c_rps / s_rps:.2f}, p99 {c_p99:.2f} vs {s_p99:.2f} ms")
PY
  exit 0
fi

modes=(lock no-lock)
declare -A url binary=([lock]="$root/target/release/demo-coupon-service")
binary[no-lock]=${binary[lock]}
if [ -n "$before" ]; then
  [ -x "$before" ] || { echo "--before $before: no such executable" >&2; exit 2; }
  modes=(lock before no-lock) binary[before]=$before
fi
for mode in "${modes[@]}"; do
  port=$(free_port)
  # --no-fence: the claim handler does not register the lock's fencing token when it reads
  # (a script instead of a plain HMGET), so both modes run the same handler.
  flag="--no-fence"; [ "$mode" = no-lock ] && flag="--no-lock"
  # The other commit's demo keeps its coupons in a database of its own: their fields may differ.
  store=$REDIS_URL; [ "$mode" = before ] && store="${REDIS_URL%/}/1"
  start_replica "$mode" "${binary[$mode]}" "$port" --redis-url "$store" $flag
  url[$mode]="http://127.0.0.1:$port"
done

if [ "$workload" = claim ]; then
  # Coupons c00000..c19999, each claimable by every user; one user per request body line.
  echo "creating 20000 coupons"
  creators=("${url[lock]}"); [ -n "$before" ] && creators+=("${url[before]}")
  python3 - "$work/users.txt" "${creators[@]}" <<'PY'
import http.client, sys, urllib.parse
for url in sys.argv[2:]:
    target = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(target.hostname, target.port)
    for n in range(20000):
        connection.request("PUT", f"/coupons/c{n:05d}", body='{"stock":1000000000}',
                           headers={"content-type": "application/json"})
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            sys.exit(f"creating coupon c{n:05d} at {url}: HTTP {response.status}")
with open(sys.argv[1], "w") as users:
    users.writelines(f'{{"user_id":"user-{n}"}}\n' for n in range(500000))
PY
  ids='c[0-1][0-9]{4}' bodies=(-Z "$work/users.txt")
else
  # Random ids that are no coupon: every claim locks its own key, reads once, answers 404.
  echo '{"user_id":"bench"}' >"$work/body.json"
  ids='x[0-9]{9}' bodies=(-D "$work/body.json")
fi
for c in $connections; do
  for round in $(seq 1 "$rounds"); do
    # Each round starts with another mode, so none always runs on the warmest host.
    n=${#modes[@]} order=()
    for i in $(seq 0 $((n - 1))); do order+=("${modes[$(((i + round) % n))]}"); done
    for mode in "${order[@]}"; do
      oha -z "${duration}s" -c "$c" -m POST -T application/json "${bodies[@]}" --no-tui \
        --output-format json -o "$work/$mode-$c-$round.json" \
        --rand-regex-url "${url[$mode]}/coupons/$ids/claim" 2>/dev/null
    done
  done
done

python3 - "$work" "$rounds" "$connections" "${modes[@]}" <<'PY'
import json, statistics, sys
work, rounds, connections, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
print(f"\n  {'conns':>5} {'mode':<8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}   (median of {rounds} alternating rounds)")
for c in connections:
    figures, per_round = {}, {}
    for mode in modes:
        runs = [json.load(open(f"{work}/{mode}-{c}-{r}.json")) for r in range(1, rounds + 1)]
        rps = statistics.median(run["summary"]["requestsPerSec"] for run in runs)
        p50 = statistics.median(run["latencyPercentiles"]["p50"] for run in runs) * 1000
        p99 = statistics.median(run["latencyPercentiles"]["p99"] for run in runs) * 1000
        codes = {}
        for run in runs:
            for code, n in run["statusCodeDistribution"].items():
                codes[code] = codes.get(code, 0) + n
        figures[mode] = (rps, p50, p99)
        per_round[mode] = [run["summary"]["requestsPerSec"] for run in runs]
        print(f"  {c:>5} {mode:<8} {rps:>9.0f} {p50:>8.3f} {p99:>8.3f}   statuses {codes}")
    for base in modes[1:]:
        (l_rps, l_p50, l_p99), (b_rps, b_p50, b_p99) = figures["lock"], figures[base]
        ratios = [lock / other for lock, other in zip(per_round["lock"], per_round[base])]
        print(f"  {c:>5} lock/{base} throughput {l_rps / b_rps:.2f} (rounds {min(ratios):.2f}-{max(ratios):.2f}), "
              f"added p50 {l_p50 - b_p50:+.3f} ms, added p99 {l_p99 - b_p99:+.3f} ms")
PY
