#!/usr/bin/env bash
# One call on the GPU machine (shared/GPU.md): device info, build, GPU tests,
# the dense benchmark and, when a daemon was carried, an end-to-end run of it.
#
#   bench/gpu/run.sh [OUT_DIR]        # default: $OUT, else build-gpu-out/
#
# Writes under OUT_DIR (at most 8 files, as the device tool brings back):
#   env.txt  build.log  tests.log  bench.log  dense_bench.json  dense_bench.txt
#   daemon.log (optional part)
# and prints the benchmark table last. Budgeted to finish well inside 10
# minutes on an H200: build <= 200 s, tests <= 90 s, bench <= 200 s (about
# 1-2 min expected), daemon <= 90 s; each stage is cut by `timeout`, so the
# whole script ends inside a 600 s device call.
set -uo pipefail

REPO="$(cd "$(dirname "$0")/../.." && pwd)"
OUT_DIR="${1:-${OUT:-$REPO/build-gpu-out}}"
mkdir -p "$OUT_DIR"
OUT_DIR="$(cd "$OUT_DIR" && pwd)"
cd "$REPO"
BUILD=build-gpu
JOBS=$(nproc)
status=0

stage() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }

stage "device"
{
  date -u
  nvidia-smi || echo "nvidia-smi failed"
  nvidia-smi --query-gpu=name,uuid,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
    --format=csv || true
  nvcc --version || /usr/local/cuda/bin/nvcc --version || true
  cmake --version | head -1
  find /usr /opt /lib -name "libcublasLt.so*" 2>/dev/null | head -5
} 2>&1 | tee "$OUT_DIR/env.txt"

stage "build"
export PATH="/usr/local/cuda/bin:$PATH"
if ! timeout 200 bash -c "cmake -S . -B $BUILD -G Ninja -DGPUTUNE_KERNELS_ONLY=ON \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
    && cmake --build $BUILD -j$JOBS --target gputune_gpu_tests gputune_dense_bench" \
    >"$OUT_DIR/build.log" 2>&1; then
  tail -40 "$OUT_DIR/build.log"
  echo "build failed; see build.log"
  exit 1
fi
tail -3 "$OUT_DIR/build.log"

stage "GPU tests"
# Run the suite binary directly: its output keeps every WARN and INFO.
if ! timeout 90 "$BUILD/tests/gpu/gputune_gpu_tests" --durations yes \
    >"$OUT_DIR/tests.log" 2>&1; then
  status=1
  grep -B3 -A25 "FAILED\|failed" "$OUT_DIR/tests.log" | head -80
fi
tail -3 "$OUT_DIR/tests.log"

stage "dense benchmark"
if ! timeout 200 "$BUILD/bench/gpu/gputune_dense_bench" --out="$OUT_DIR" \
    --budget=0.5 >/dev/null 2>"$OUT_DIR/bench.log"; then
  status=1
  tail -20 "$OUT_DIR/bench.log"
fi

# ---------------------------------------------------------------------------
# OPTIONAL: the whole daemon end to end, only when a build of it was carried
# in .carry/ (bin/gputuned, lib/ with its shared libraries; see GPU.md).
# ---------------------------------------------------------------------------
if [ -x .carry/bin/gputuned ]; then
  stage "daemon (optional)"
  export LD_LIBRARY_PATH="$PWD/.carry/lib:${LD_LIBRARY_PATH:-}"
  rm -f /tmp/g.sock /tmp/g.db /tmp/g.db-wal /tmp/g.db-shm
  .carry/bin/gputuned --backend=cuda --listen=unix:///tmp/g.sock \
    --db=/tmp/g.db >"$OUT_DIR/daemon.log" 2>&1 &
  daemon=$!
  for _ in $(seq 1 40); do [ -S /tmp/g.sock ] && break; sleep 0.25; done
  if [ -S /tmp/g.sock ] && kill -0 "$daemon" 2>/dev/null; then
    echo "gputuned is serving on unix:///tmp/g.sock"
    if [ -x .carry/bin/gputunectl ]; then
      ctl() { timeout 120 .carry/bin/gputunectl --endpoint=unix:///tmp/g.sock "$@"; }
      {
        ctl status
        for spec in "1 4096 4096" "16 14336 4096" "128 4096 6144"; do
          set -- $spec
          phase=$([ "$1" -le 16 ] && echo decode || echo prefill)
          ctl tune "dense_bf16/$phase/bench/m=$1/k=$2/n=$3@gpu-bench"
        done
        ctl list
      } 2>&1 | tee -a "$OUT_DIR/daemon.log" || status=1
    fi
  else
    echo "gputuned did not come up; see daemon.log"
    status=1
  fi
  kill "$daemon" 2>/dev/null
  wait "$daemon" 2>/dev/null
fi

stage "result"
grep -E "^(All tests passed|test cases:)" "$OUT_DIR/tests.log" || true
if [ -s "$OUT_DIR/dense_bench.txt" ]; then
  cat "$OUT_DIR/dense_bench.txt"
else
  echo "no benchmark table (see bench.log)"
fi
exit $status
