#!/usr/bin/env bash
# Installs what building and running gputune needs on Debian 12 (as root);
# with --test, also what its tests and checking build need (scripts/test.sh
# passes it; scripts/run.sh does not). Quiet and quick when everything is
# there already.
#
#   bash scripts/install-deps.sh          # build + run: gputuned, gputunectl, the client
#   bash scripts/install-deps.sh --test   # and every test suite, the clang check build, fuzzers
#   bash scripts/install-deps.sh --test-configure
#       # build + run, and what configuring the test build looks for; the
#       # rest of --test is needed only when the tests run, so scripts/test.sh
#       # installs it while the gcc build compiles
set -euo pipefail

with_tests=0 configure_tests=0
case ${1:-} in
  "") ;;
  --test) with_tests=1 configure_tests=1 ;;
  --test-configure) configure_tests=1 ;;
  *) echo "usage: $0 [--test | --test-configure]" >&2 && exit 2 ;;
esac

# Building and running: the compilers and the libraries gputuned, gputunectl
# and libgputune link.
packages=(
  build-essential cmake ninja-build ccache pkg-config git
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev libsqlite3-dev sqlite3 libsystemd-dev
  # the fleet tier's client library; CLI parsing
  libpq-dev libcli11-dev
  # the Redis-protocol door: hiredis reads its requests
  libhiredis-dev
  # metrics: prometheus-cpp's registry and text serializer
  prometheus-cpp-dev
)
# What configuring the test build looks for (CMake decides by them which
# suites it builds and registers): Catch2 (a copy travels in
# tests/third_party for machines without it), and pytest and setuptools for
# the Python package's suite.
test_configure_packages=(catch2 python3-pytest python3-setuptools)
test_packages=(
  # jq, which the docs' examples (docs_check) pipe answers through
  jq
  # package checks (cpack's deb generator, dpkg-shlibdeps, lintian), the
  # units' checks (systemd-analyze), metrics checks (promtool)
  systemd dpkg-dev file lintian prometheus
  # checking builds: clang's thread-safety analysis, sanitizers, libFuzzer
  # (llvm-16: the symbolizer the sanitizers look for)
  clang-16 libclang-rt-16-dev libfuzzer-16-dev llvm-16
  # the fleet tier: a real PostgreSQL server in the tests; openssl makes the
  # certificates of its TLS test; a real Redis server for the Redis door
  postgresql-15 openssl redis-server redis-tools python3-redis
  # the Python bindings' tests, the C API's Python package (pip install
  # ./python, offline) and the Rust example
  python3-pip python3-venv cargo
  # tests only: gputune.torch's import and fall-back (python/tests/test_torch.py)
  # on Debian's CPU-only PyTorch 1.13, the largest item here (175 packages with
  # its dependencies; docs/testing.md, "How long it takes", has its cost)
  python3-torch
  # grpcprobe, the grpcurl stand-in the reflection test uses where it is
  # built (below)
  golang-go golang-google-grpc-dev golang-google-protobuf-dev
  python3-yaml  # deploy/kubernetes/'s test (kubernetes_test.py)
)
# Installed when an apt source has them, else their tests skip, saying so:
# kubectl is not in Debian 12's own archive (Kubernetes' apt repository,
# pkgs.k8s.io, has it), and kubernetes_test.py needs it.
optional_test_packages=(kubectl)
if ((configure_tests)); then packages+=("${test_configure_packages[@]}"); fi
if ((with_tests)); then packages+=("${test_packages[@]}"); fi

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
if ((with_tests)); then
  for p in "${optional_test_packages[@]}"; do
    command -v "$p" >/dev/null && continue
    # The package lists as they are (apt-get update ran above on a fresh
    # machine): no update on every run where no source has it.
    if apt-cache show "$p" >/dev/null 2>&1; then
      echo "gputune: installing $p" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null
    else
      echo "gputune: $p is in no apt source here: the tests that need it skip" >&2
    fi
  done
fi

if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  echo "gputune: CUDA toolkit found at /usr/local/cuda (the CUDA backend is built)" >&2
else
  echo "gputune: no CUDA toolkit at /usr/local/cuda: building without the CUDA backend" >&2
fi

((with_tests)) || exit 0

# grpcprobe (grpcurl stand-in) from the shared tools, when they are beside us.
# Without it (or grpcurl) the reflection test and docs-check's reflection
# examples are skipped, saying so.
here=$(cd "$(dirname "$0")/.." && pwd)
probe_src="$here/../shared/tools/grpcprobe"
if ! command -v grpcprobe >/dev/null 2>&1 && [[ -f "$probe_src/build.sh" ]]; then
  GOCACHE=/tmp/grpcprobe-gocache sh "$probe_src/build.sh" /usr/local/bin/grpcprobe >&2 || \
    echo "gputune: grpcprobe did not build; the reflection test will be skipped" >&2
fi
