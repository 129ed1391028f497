#!/usr/bin/env bash
# Gathers gputuned, gputunectl, the CUDA backend module, libgputune.so with
# its replay module (what python/ loads) and the shared libraries they need
# that the GPU machine does not have, into .carry/ for the device tool's
# `carry` (the GPU machine has the CUDA toolkit, no Debian libraries):
#   bash bench/gpu/carry.sh [BUILD_DIR]      # then carry ".carry" and run
#   bash bench/gpu/run.sh "$OUT"             # on the GPU machine
#
# .carry/lib: what the machine lacks (gRPC, protobuf, Abseil, SQLite, spdlog,
#   fmt, ...). Never: any of glibc's own libraries (libc, libm, libpthread,
#   libdl, librt, ld-linux, libresolv, libnss_*, ...: is_glibc below), the
#   CUDA driver (libcuda), the CUDA runtime and cuBLAS(Lt) (the machine's
#   CUDA 13, which run.sh finds and puts first on the path).
# .carry/lib-fallback: libraries every Linux has in some version (libstdc++,
#   libgcc_s, zlib, OpenSSL, systemd's and compression libraries). They are
#   NOT on the library path; run.sh links one in only when the machine lacks
#   it or, for libstdc++ and libgcc_s, has an older one (GLIBCXX versions), so
#   Debian's libstdc++ never goes ahead of a newer machine's.
# .carry/ is git-ignored. Stays under the 64 MiB the tool carries.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$root/.carry
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib/gputune" "$out/lib-fallback"
for b in daemon/gputuned client/gputunectl; do
  cp "$build/$b" "$out/bin/"
  strip "$out/bin/$(basename "$b")"
done
# The CUDA backend module, where gputuned looks beside itself.
cp "$build/lib/gputune/libgputune_cuda.so" "$out/lib/gputune/"
strip --strip-unneeded "$out/lib/gputune/libgputune_cuda.so"
# The C API's library and, beside it, the replay module it dlopens: the
# Python package and gputune.torch load them there (run.sh's Python stage).
for l in libgputune.so.0 libgputune_dense.so.0; do
  cp -L "$build/client/$l" "$out/lib/"
done
is_glibc() {
  case "$(basename "$1")" in
    libc.so*|libm.so*|libmvec.so*|libpthread.so*|libdl.so*|librt.so*|\
    ld-linux*|libresolv.so*|libnss_*|libutil.so*|libanl.so*|libnsl.so*|\
    libBrokenLocale.so*|libthread_db.so*|libc_malloc_debug.so*|\
    libmemusage.so*|libpcprofile.so*|libcrypt.so.1) return 0 ;;
  esac
  command -v dpkg-query >/dev/null &&
    dpkg-query -S "$(readlink -f "$1")" 2>/dev/null | grep -q '^libc6[:,]'
}
ldd "$out/bin/gputuned" "$out/bin/gputunectl" \
    "$out/lib/gputune/libgputune_cuda.so" "$out/lib/libgputune.so.0" \
    "$out/lib/libgputune_dense.so.0" | awk '/=> \// {print $3}' | sort -u |
  while read -r lib; do
    # glibc's own, never carried: a carried one (libresolv.so.2 was one)
    # shadows the machine's glibc for every program on the path, python3
    # included. glibc's libraries are those of Debian's libc6 package; the
    # names are the fallback where dpkg cannot tell.
    if is_glibc "$lib"; then continue; fi
    case "$(basename "$lib")" in
      libcuda.so*|libcudart.so*|libcublas*.so*) continue ;;  # the machine's CUDA
      libstdc++.so*|libgcc_s.so*|libz.so*|libssl.so*|libcrypto.so*|\
      libsystemd.so*|liblzma.so*|libzstd.so*|liblz4.so*|libcap.so*|\
      libgcrypt.so*|libgpg-error.so*)
        cp -L "$lib" "$out/lib-fallback/" ;;
      *) cp -L "$lib" "$out/lib/" ;;
    esac
  done
strip --strip-unneeded "$out"/lib/*.so* "$out"/lib-fallback/*.so* 2>/dev/null || true
for lib in "$out"/lib/*.so* "$out"/lib-fallback/*.so*; do
  [ -e "$lib" ] || continue
  if is_glibc "$lib"; then
    echo "carry.sh: $lib is glibc's; it must not travel" >&2
    exit 1
  fi
done
du -sh "$out"
size=$(du -sm "$out" | cut -f1)
if [ "$size" -gt 64 ]; then
  echo "carry.sh: .carry is ${size} MiB, over the 64 MiB the device tool carries" >&2
  exit 1
fi
