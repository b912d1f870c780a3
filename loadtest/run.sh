#!/usr/bin/env bash
# Claim storm against three demo replicas sharing one Redis, driven by oha; prints one
# summary table and exits non-zero when the coupon was oversold.
#
#   loadtest/run.sh                      # with the lock: must show oversold 0
#   loadtest/run.sh --no-lock            # the control: oversells
#   loadtest/run.sh --requests 6000 --concurrency 96 --stock 200 --users 3000
#
# The summary and a chart (latency histogram, answers by status) go to --out (default
# target/loadtest-run). While it runs, the first replica's dashboard shows the storm live.
#
# Uses REDIS_URL when set, otherwise starts its own redis-server on a free port. Every process
# it starts is stopped on exit, also on Ctrl-C.
set -euo pipefail

requests=3000 concurrency=48 stock=100 users=1500 work_ms=2 replicas=3 no_lock="" out=""
usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
  echo "options: --requests N (3000) --concurrency C (48, split over replicas) --stock S (100)"
  echo "         --users U (1500 distinct users) --work-ms MS (2) --replicas R (3) --no-lock"
  echo "         --out DIR (target/loadtest-run)"
}
while [ $# -gt 0 ]; do
  case "$1" in
    --requests) requests=$2; shift 2 ;;
    --concurrency) concurrency=$2; shift 2 ;;
    --stock) stock=$2; shift 2 ;;
    --users) users=$2; shift 2 ;;
    --work-ms) work_ms=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --no-lock) no_lock="--no-lock"; shift ;;
    --out) out=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "unknown option $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ "$concurrency" -lt "$replicas" ] || [ "$requests" -lt "$replicas" ]; then
  echo "--requests and --concurrency must be at least --replicas ($replicas)" >&2; exit 2
fi

root=$(cd "$(dirname "$0")/.." && pwd)
out=${out:-$root/target/loadtest-run}
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
wait_until() { # wait_until SECONDS COMMAND...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo "timed out waiting for: $*" >&2; return 1; }
    sleep 0.05
  done
}

if ! command -v oha >/dev/null; then
  echo "oha not found: installing it with 'cargo install oha --locked' (takes a few minutes)"
  cargo install oha --locked
fi
echo "building the demo (release)"
cargo build --release --quiet -p demo-coupon-service --manifest-path "$root/Cargo.toml"

if [ -z "${REDIS_URL:-}" ]; then
  command -v redis-server >/dev/null || { echo "redis-server not found: apt-get install redis-server" >&2; exit 1; }
  redis_port=$(free_port)
  redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
    >"$work/redis.log" 2>&1 &
  pids+=($!)
  REDIS_URL="redis://127.0.0.1:$redis_port"
  wait_until 10 redis-cli -p "$redis_port" ping
fi

urls=()
for i in $(seq 1 "$replicas"); do
  port=$(free_port)
  RUST_LOG=warn "$root/target/release/demo-coupon-service" --listen "127.0.0.1:$port" \
    --redis-url "$REDIS_URL" --work-ms "$work_ms" $no_lock >"$work/replica-$i.log" 2>&1 &
  pids+=($!)
  urls+=("http://127.0.0.1:$port")
  wait_until 20 curl -fsS "http://127.0.0.1:$port/healthz"
done

coupon="load-$(date +%s)-$$"
curl -fsS -X PUT -H 'content-type: application/json' -d "{\"stock\": $stock}" \
  "${urls[0]}/coupons/$coupon" >/dev/null

# One body file per replica; each user appears in several files, so repeated claims of one
# user land on different replicas. oha picks a random line per request.
python3 - "$work" "$replicas" "$users" <<'PY'
import json, sys
work, replicas, users = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for r in range(replicas):
    with open(f"{work}/bodies-{r}.txt", "w") as f:
        for u in range(users):
            f.write(json.dumps({"user_id": f"user-{u}"}) + "\n")
PY

echo "dashboard (live while the storm runs): ${urls[0]}/"
echo "claiming: $requests requests, $concurrency connections over $replicas replicas, stock $stock, $users users, lock $([ -n "$no_lock" ] && echo OFF || echo on)"
started=$(date +%s.%N)
oha_pids=()
for r in $(seq 0 $((replicas - 1))); do
  oha -n $((requests / replicas)) -c $((concurrency / replicas)) -m POST -T application/json \
    -Z "$work/bodies-$r.txt" --no-tui --output-format json -o "$work/oha-$r.json" \
    --db-url "$work/oha-$r.db" "${urls[$r]}/coupons/$coupon/claim" 2>"$work/oha-$r.err" &
  oha_pids+=($!)
  pids+=($!)
done
for pid in "${oha_pids[@]}"; do wait "$pid"; done
finished=$(date +%s.%N)

curl -fsS "${urls[0]}/coupons/$coupon" >"$work/coupon.json"
python3 "$root/loadtest/summarize.py" "$work" "$out" "$replicas" "$started" "$finished" "$stock" "$users" "${no_lock:+off}"
