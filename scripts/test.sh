#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test suite (ctest). GPU tests
# print "skipped: no CUDA device" where there is none.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install-deps.sh"
bash "$root/scripts/build.sh"
cd "$root/build"
ctest -j "${GPUTUNE_JOBS:-2}" --output-on-failure --timeout 300
# ctest hides the GPU suite's skip notices: say them here.
if [[ -x tests/gpu/gputune_gpu_tests ]]; then
  skipped=$(./tests/gpu/gputune_gpu_tests 2>&1 | grep -c "skipped: no CUDA device" || true)
  if [[ "$skipped" -gt 0 ]]; then
    echo "GPU suite: $skipped test cases skipped: no CUDA device"
  fi
fi
