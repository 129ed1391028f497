#!/usr/bin/env bash
# Configures and builds gputune into ./build (or $GPUTUNE_BUILD_DIR), -j2.
# Arguments go to cmake's configure step; $GPUTUNE_TARGETS (space-separated)
# builds those targets instead of all. CC/CXX pick the compiler when the
# build folder is new.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GPUTUNE_BUILD_DIR:-$root/build}
jobs=${GPUTUNE_JOBS:-2}
# One ccache for every checkout and build folder: paths relative to the
# source tree, and the working directory left out of the hash.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
targets=()
for t in ${GPUTUNE_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
