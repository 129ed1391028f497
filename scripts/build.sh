#!/usr/bin/env bash
# Configures and builds gputune into ./build (or $GPUTUNE_BUILD_DIR), -j2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GPUTUNE_BUILD_DIR:-$root/build}
jobs=${GPUTUNE_JOBS:-2}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$jobs"
