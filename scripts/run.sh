#!/usr/bin/env bash
# Quick start: installs what building and running needs (not the test
# dependencies: scripts/test.sh adds those), builds gputuned and gputunectl
# (and the CUDA backend module gputuned loads; no tests, no benchmarks), and
# runs gputuned in the foreground on a local socket and database:
#   socket   unix://$PWD/var/gpu0.sock
#   database $PWD/var/gpu0.db
# with the CUDA backend when a GPU is usable, else the host (CPU) backend.
# Extra arguments go to gputuned (e.g. --backend=host). Ctrl-C stops it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/install-deps.sh"
GPUTUNE_TARGETS="gputuned gputunectl" bash "$root/scripts/build.sh"
cd "$root"
echo "gputune: starting gputuned; from another terminal reach it with:" >&2
echo "  export GPUTUNE_ENDPOINT=unix://$root/var/gpu0.sock; $root/build/client/gputunectl status" >&2
exec "$root/build/daemon/gputuned" --backend=auto "$@"
