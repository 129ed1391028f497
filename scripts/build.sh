#!/usr/bin/env bash
# Configures and builds gputune into ./build (or $GPUTUNE_BUILD_DIR), -j2.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GPUTUNE_BUILD_DIR:-$root/build}
jobs=${GPUTUNE_JOBS:-2}
# One ccache for every checkout and build folder: paths relative to the
# source tree, and the working directory left out of the hash.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "$@" >/dev/null
cmake --build "$build" -j "$jobs"
