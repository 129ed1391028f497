#!/usr/bin/env bash
# Gathers gputuned, gputunectl and the shared libraries they need (but glibc's,
# the CUDA driver's and the CUDA toolkit's, which the GPU machine has) into
# .carry/ for the device tool's `carry`, as ../shared/GPU.md describes:
#   bash bench/gpu/carry.sh [BUILD_DIR]      # then carry ".carry" and run
#   bash bench/gpu/run.sh "$OUT"             # on the GPU machine
# .carry/ is git-ignored. Keep it under the 64 MiB the tool carries.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$root/.carry
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
for b in daemon/gputuned client/gputunectl; do
  cp "$build/$b" "$out/bin/"
  strip "$out/bin/$(basename "$b")"
done
# The CUDA backend module, where gputuned looks beside itself.
mkdir -p "$out/lib/gputune"
cp "$build/lib/gputune/libgputune_cuda.so" "$out/lib/gputune/"
strip --strip-unneeded "$out/lib/gputune/libgputune_cuda.so"
ldd "$out/bin/gputuned" "$out/bin/gputunectl" \
    "$out/lib/gputune/libgputune_cuda.so" | awk '/=> \// {print $3}' | sort -u |
  while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libcuda.so*) continue ;;
      libcudart.so*|libcublas*.so*) continue ;;  # the GPU machine's own CUDA 13
    esac
    cp -L "$lib" "$out/lib/"
  done
strip --strip-unneeded "$out"/lib/*.so* 2>/dev/null || true
du -sh "$out"
