#!/usr/bin/env bash
# The Redis front door against Debian's redis-server, in the same run, with
# redis-benchmark (redis-tools): GET of a stored key at 1, 8 and 32
# connections (p50/p99 latency, throughput), MGET of 1,000 stored keys, and
# GET of a 4 MiB value (a Triton kernel binary's size).
# Not a test: numbers for docs/performance.md.
#
#   bench/redis/run.sh build/daemon/gputuned [requests]
set -euo pipefail
gputuned=${1:?usage: run.sh GPUTUNED [requests]}
requests=${2:-20000}
dir=$(mktemp -d /tmp/gputune-redis-bench-XXXXXX)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ref_port=$(port)
gt_port=$(port)
redis-server --port "$ref_port" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$dir" >/dev/null 2>&1 &
ref_pid=$!
"$gputuned" --backend=none --listen="unix://$dir/g.sock" --db="$dir/g.db" \
  --redis_listen="127.0.0.1:$gt_port" >"$dir/gputuned.log" 2>&1 &
gt_pid=$!
trap 'kill $ref_pid $gt_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
for p in "$ref_port" "$gt_port"; do
  for _ in $(seq 200); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.05; done
done

keys=()
for i in $(seq 1000); do keys+=("k$i"); done
for p in "$ref_port" "$gt_port"; do
  redis-cli -p "$p" SET key:__rand_int__ "$(head -c 200 /dev/zero | tr '\0' v)" >/dev/null
  # One MSET: the keys of the MGET benchmark, 200-byte values.
  args=()
  for k in "${keys[@]}"; do args+=("$k" "$(printf '%0200d' 0)"); done
  redis-cli -p "$p" MSET "${args[@]}" >/dev/null
  head -c $((2 << 20)) /dev/urandom | od -An -tx1 | tr -d ' \n' | head -c $((4 << 20)) |
    redis-cli -p "$p" -x SET big >/dev/null
done

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
printf '%-14s %-12s %10s %8s %8s\n' server test "req/s" p50_ms p99_ms
run() {  # run NAME PORT LABEL ARGS...
  local name=$1 p=$2 label=$3
  shift 3
  # CSV: "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",
  # "p95_latency_ms","p99_latency_ms","max_latency_ms"
  redis-benchmark -p "$p" --csv "$@" 2>/dev/null | tail -1 | tr -d '"' |
    awk -F, -v n="$name" -v l="$label" '{printf "%-14s %-12s %10.0f %8.3f %8.3f\n", n, l, $2, $5, $7}'
}
for c in 1 8 32; do
  run redis-server "$ref_port" "GET c=$c" -c "$c" -n "$requests" -t get
  run gputuned "$gt_port" "GET c=$c" -c "$c" -n "$requests" -t get
done
mget_n=$((requests / 100))
run redis-server "$ref_port" "MGET 1000" -c 1 -n "$mget_n" MGET "${keys[@]}"
run gputuned "$gt_port" "MGET 1000" -c 1 -n "$mget_n" MGET "${keys[@]}"
run redis-server "$ref_port" "GET 4MiB" -c 1 -n "$mget_n" GET big
run gputuned "$gt_port" "GET 4MiB" -c 1 -n "$mget_n" GET big
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
