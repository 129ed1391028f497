#!/bin/bash
# CPU time per BatchLookup in the client and in gputuned, from /proc: runs
# gputune_lookup_bench with --batch_profile_seconds (BatchLookup of 10,000
# keys back to back), reads both processes' user + system time over 4 s
# of it, and divides by the calls made in those 4 s (from the bench's mean).
#
#   bench/lookup/cpu_per_call.sh [path/to/gputune_lookup_bench]
#   mean 1.87 ms a call; CPU a call: client 1.52 ms, gputuned 1.15 ms
set -euo pipefail
bench=${1:-$(dirname "$0")/../../build/bench/lookup/gputune_lookup_bench}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$bench" --procs= --rounds=1 --seconds=0.2 --batch_profile_seconds=7 \
  >"$log" 2>&1 &
bench_pid=$!
for _ in $(seq 300); do
  grep -q "back to back" "$log" && break
  sleep 0.1
done
line=$(grep "back to back" "$log") || { cat "$log" >&2; exit 1; }
daemon=$(sed 's/.*gputuned pid \([0-9]*\).*/\1/' <<<"$line")
client=$(sed 's/.*this pid \([0-9]*\).*/\1/' <<<"$line")
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
c0=$(ticks "$client"); d0=$(ticks "$daemon"); t0=$(date +%s.%N)
sleep 4
c1=$(ticks "$client"); d1=$(ticks "$daemon"); t1=$(date +%s.%N)
wait "$bench_pid"
mean=$(awk '/^mean/ {print $2}' "$log")
hz=$(getconf CLK_TCK)
python3 - "$mean" "$t0" "$t1" "$c0" "$c1" "$d0" "$d1" "$hz" <<'PY'
import sys
mean, t0, t1, c0, c1, d0, d1, hz = map(float, sys.argv[1:])
calls = (t1 - t0) * 1000 / mean
ms = lambda ticks: ticks * 1000 / hz / calls
print(f"mean {mean:.2f} ms a call; CPU a call: client {ms(c1 - c0):.2f} ms, "
      f"gputuned {ms(d1 - d0):.2f} ms")
PY
