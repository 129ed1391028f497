#!/usr/bin/env bash
# Installs what building and testing gputune needs on Debian 12 (as root).
# Quiet and quick when everything is there already.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # the Redis front door's request reader (hiredis's parser)
  libhiredis-dev
  libabsl-dev libspdlog-dev catch2 libsqlite3-dev sqlite3 libsystemd-dev
  systemd dpkg-dev file
  # checking builds: clang's thread-safety analysis, sanitizers, libFuzzer
  # (llvm-16: the symbolizer the sanitizers look for)
  clang-16 libclang-rt-16-dev libfuzzer-16-dev llvm-16
  # the fleet tier (a real PostgreSQL server in the tests; openssl makes the
  # certificates of its TLS test)
  postgresql-15 libpq-dev openssl
  # CLI parsing, metrics checks, package checks, Python bindings
  libcli11-dev prometheus lintian python3-pytest
  # the C API's Python package (pip install ./python, offline) and Rust example
  python3-pip python3-setuptools cargo
  # tests only: gputune.torch's import and fall-back (python/tests/test_torch.py)
  # on Debian's CPU-only PyTorch 1.13: 175 packages, 70 s on the 2-core build
  # machine (time apt-get install -y --no-install-recommends python3-torch,
  # 2026-12-02)
  python3-torch
  # tests only: the Redis front door's clients and reference server
  # (tests/redis/; the tests start their own redis-server)
  redis-server redis-tools python3-redis
  # grpcprobe, the grpcurl stand-in the reflection test uses
  golang-go golang-google-grpc-dev golang-google-protobuf-dev
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "gputune: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "gputune: CUDA toolkit found at /usr/local/cuda (the CUDA backend is built)" >&2
else
  echo "gputune: no CUDA toolkit at /usr/local/cuda: building without the CUDA backend" >&2
fi

# grpcprobe (grpcurl stand-in) from the shared tools, when they are beside us.
here=$(cd "$(dirname "$0")/.." && pwd)
probe_src="$here/../shared/tools/grpcprobe"
if ! command -v grpcprobe >/dev/null 2>&1 && [[ -f "$probe_src/build.sh" ]]; then
  GOCACHE=/tmp/grpcprobe-gocache sh "$probe_src/build.sh" /usr/local/bin/grpcprobe >&2 || \
    echo "gputune: grpcprobe did not build; the reflection test will be skipped" >&2
fi
