#!/bin/bash
# The DaemonSet's entrypoint (gputuned-daemonset.yaml): one gputuned per GPU
# this pod sees, as the systemd unit gputuned@N runs one per GPU of a host.
# Each listens on $GPUTUNE_SOCKET_DIR/gpu<N>.sock (a hostPath the inference
# pods mount) and links by-uuid/<GPU UUID>.sock there, with its database in
# $GPUTUNE_STATE_DIR/gpu<N>.db. The pod ends when any daemon ends (the
# kubelet restarts it); SIGTERM stops them all cleanly (links and sockets
# removed).
#
#   GPUTUNE_GPUS="0 1"        the indices to serve (default: every GPU
#                             nvidia-smi lists)
#   GPUTUNED_ARGS="--flag=v"  more flags for every daemon
set -euo pipefail
socket_dir=${GPUTUNE_SOCKET_DIR:-/run/gputuned}
state_dir=${GPUTUNE_STATE_DIR:-/var/lib/gputuned}
# nvidia-smi's indices: CUDA numbers GPUs the same way only in PCI order.
export CUDA_DEVICE_ORDER=PCI_BUS_ID
gpus=${GPUTUNE_GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader)}
read -r -a indices <<<"$gpus"
if ((${#indices[@]} == 0)); then
  echo "gputuned-per-gpu: no GPU visible (is NVIDIA_VISIBLE_DEVICES=all set?)" >&2
  exit 1
fi
mkdir -p "$socket_dir" "$state_dir"
pids=()
stop() { kill -TERM "${pids[@]}" 2>/dev/null || true; }
trap stop TERM INT
for i in "${indices[@]}"; do
  # shellcheck disable=SC2086 # GPUTUNED_ARGS is a list of flags
  gputuned --device="$i" --listen="unix://$socket_dir/gpu$i.sock" \
    --db="$state_dir/gpu$i.db" ${GPUTUNED_ARGS:-} &
  pids+=("$!")
done
status=0
wait -n "${pids[@]}" || status=$?
stop
wait || true
exit "$status"
