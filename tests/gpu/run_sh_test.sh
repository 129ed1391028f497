#!/usr/bin/env bash
# CPU test of bench/gpu/run.sh's shell behaviour, no GPU needed: a copy of
# run.sh in a scratch tree with a stand-in carried daemon (a process that
# serves a unix socket and ignores SIGTERM) and gputunectl, and a cmake that
# fails. Checks that:
#  - a failed kernels build does not skip the carried daemon's stage;
#  - run.sh stops the daemon process itself (not a subshell) and checks
#    that it is gone, escalating to SIGKILL when SIGTERM is ignored;
#  - env.txt is written within its stage's timeout without nvidia-smi and
#    says where the CUDA libraries were looked for.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
daemon_pid=""
cleanup() {
  [ -n "$daemon_pid" ] && kill -KILL "$daemon_pid" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; echo "--- run.sh output:"; cat "$tmp/run.out"; exit 1; }

mkdir -p "$tmp/repo/bench/gpu" "$tmp/repo/.carry/bin" "$tmp/bin" "$tmp/out"
cp "$src/bench/gpu/run.sh" "$tmp/repo/bench/gpu/run.sh"
cat >"$tmp/repo/.carry/bin/gputuned" <<'PY'
#!/usr/bin/env python3
import os, signal, socket, sys, time
listen = next(a for a in sys.argv if a.startswith("--listen=unix://"))
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a daemon stuck in a CUDA call
s = socket.socket(socket.AF_UNIX)
s.bind(listen[len("--listen=unix://"):])
s.listen(1)
with open(os.environ["FAKE_DAEMON_PID"], "w") as f:
    f.write(str(os.getpid()))
time.sleep(120)  # bounded, should run.sh not stop it
PY
printf '#!/bin/sh\necho "gputunectl $*"\n' >"$tmp/repo/.carry/bin/gputunectl"
printf '#!/bin/sh\necho "cmake refused (test)" >&2\nexit 1\n' >"$tmp/bin/cmake"
chmod +x "$tmp/repo/.carry/bin/"* "$tmp/bin/cmake"

rc=0
FAKE_DAEMON_PID="$tmp/daemon.pid" PATH="$tmp/bin:$PATH" \
  GPUTUNE_RUN_STAGES="env build daemon" \
  timeout 120 bash "$tmp/repo/bench/gpu/run.sh" "$tmp/out" 100 \
  >"$tmp/run.out" 2>&1 || rc=$?

[ -s "$tmp/daemon.pid" ] || fail "the daemon stage did not start the daemon after a failed build"
daemon_pid=$(cat "$tmp/daemon.pid")
grep -q "build failed" "$tmp/run.out" || fail "the failed build was not reported"
[ "$rc" -ne 0 ] || fail "run.sh exited 0 after a failed build"
grep -q "gputuned (pid $daemon_pid) stopped" "$tmp/run.out" ||
  fail "run.sh did not report stopping the daemon's own pid $daemon_pid"
if kill -0 "$daemon_pid" 2>/dev/null; then
  fail "the daemon (pid $daemon_pid) is still running after run.sh"
fi
grep -q "gputunectl --endpoint=unix://" "$tmp/out/daemon.log" ||
  fail "gputunectl was not run against the daemon"
[ -s "$tmp/out/env.txt" ] || fail "no env.txt"
grep -q "CUDA libraries for the carried binaries" "$tmp/out/env.txt" ||
  fail "env.txt does not say where the CUDA libraries are"
grep -q "no carried module" "$tmp/out/env.txt" ||
  fail "env.txt does not report the carried module"
echo "PASS"
