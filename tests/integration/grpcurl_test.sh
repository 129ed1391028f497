#!/usr/bin/env bash
# What an operator does with grpcurl, through server reflection only (no
# .proto files): list, describe, GetStatus, Claim, Record, ListEntries with
# readable JSON. Where grpcurl itself is not installed, grpcprobe (a stand-in
# with the same reflection client and JSON) runs the same grpcurl command
# lines through tests/support/grpcurl-via-grpcprobe. Exit 77 = skipped.
set -euo pipefail
gputuned=$1
dir=$(mktemp -d /tmp/gputune-grpcurl-XXXXXX)
pid=
trap '[[ -n $pid ]] && { kill $pid 2>/dev/null; wait $pid 2>/dev/null; }; rm -rf "$dir"' EXIT
if command -v grpcurl >/dev/null; then
  echo "reflection client: $(command -v grpcurl)"
elif command -v grpcprobe >/dev/null; then
  mkdir "$dir/bin"
  ln -s "$(cd "$(dirname "$0")/../support" && pwd)/grpcurl-via-grpcprobe" "$dir/bin/grpcurl"
  export PATH=$dir/bin:$PATH
  echo "reflection client: $(command -v grpcprobe) (as grpcurl)"
else
  echo "skipped: no reflection client on PATH (grpcurl, or its stand-in grpcprobe)"
  exit 77
fi
"$gputuned" --backend=host --listen="unix://$dir/g.sock" --db="$dir/g.db" >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 100); do [[ -S "$dir/g.sock" ]] && break; sleep 0.05; done

call() {  # call METHOD JSON
  grpcurl -plaintext -unix -d "$2" "$dir/g.sock" "$1"
}
run() {  # run list|describe ARGS
  grpcurl -plaintext -unix "$dir/g.sock" "$@"
}
expect() {  # expect WHAT OUTPUT PATTERN
  if ! grep -q -- "$3" <<<"$2"; then
    echo "FAIL: $1: expected /$3/ in:"; echo "$2"; exit 1
  fi
  echo "ok: $1"
}

out=$(run list)
expect "list shows the service" "$out" "gputune.v1.TuneService"
expect "list shows health" "$out" "grpc.health.v1.Health"
out=$(run describe gputune.v1.TuneService)
expect "describe shows Claim" "$out" 'Claim *( *\.\?gputune\.v1\.ClaimRequest'
expect "describe shows SubscribeChanges" "$out" 'SubscribeChanges *( *\.\?gputune\.v1\.SubscribeChangesRequest'
out=$(call gputune.v1.TuneService/GetStatus '{}')
expect "GetStatus names the backend" "$out" '"backend": *"host"'
key='{"dense_bf16":{"phase":"PHASE_DECODE","role":"attn.qkv","tokens":1,"input_features":64,"output_features":64},"candidate_set":"cs1"}'
out=$(call gputune.v1.TuneService/Claim "{\"key\":$key,\"holder\":\"grpcurl\"}")
expect "Claim is granted with an enum by name" "$out" "CLAIM_OUTCOME_GRANTED"
claim=$(grep -o '"claimId": *"[0-9]*"' <<<"$out" | grep -o '[0-9]*' | tail -1)
out=$(call gputune.v1.TuneService/Record "{\"claim_id\":$claim,\"execution\":{\"kernel\":\"my.kernel\",\"params\":{\"tile\":128}},\"chosen_time\":\"0.000012s\"}")
expect "Record returns the entry" "$out" '"recordedBy": *"grpcurl"'
out=$(call gputune.v1.TuneService/Lookup "{\"key\":$key}")
expect "Lookup reads as a HIT" "$out" "KEY_STATE_HIT"
entry=$(grep -o '"entry": *"[^"]*"' <<<"$out" | sed 's/.*"\([^"]*\)"$/\1/')
expect "Lookup's entry (a serialized Entry) holds the execution" \
  "$(base64 -d <<<"$entry" | tr -cd '[:print:]')" 'my.kernel'
other='{"dense_bf16":{"phase":"PHASE_PREFILL","role":"attn.qkv","tokens":64,"input_features":64,"output_features":64},"candidate_set":"cs1"}'
out=$(call gputune.v1.TuneService/BatchLookup "{\"keys\":[$key,$other]}")
expect "BatchLookup answers in order" "$(tr -d ' \n' <<<"$out")" 'KEY_STATE_HIT.*KEY_STATE_MISS'
out=$(call gputune.v1.TuneService/ListEntries '{}')
expect "ListEntries shows the entry with a Timestamp" "$out" '"measuredAt": *"20'
expect "ListEntries shows the HIT state" "$out" "KEY_STATE_HIT"
out=$(call gputune.v1.TuneService/TuneDense "{\"key\":{\"dense_bf16\":{\"phase\":\"PHASE_DECODE\",\"role\":\"mlp\",\"tokens\":2,\"input_features\":128,\"output_features\":128},\"candidate_set\":\"cs1\"},\"wait\":true}")
expect "TuneDense answers a HIT" "$out" "KEY_STATE_HIT"
out=$(call gputune.v1.TuneService/GetEntry "{\"key\":{\"dense_bf16\":{\"phase\":\"PHASE_DECODE\",\"role\":\"mlp\",\"tokens\":2,\"input_features\":128,\"output_features\":128},\"candidate_set\":\"cs1\"}}")
expect "GetEntry explains the choice per candidate" "$out" '"isDefault": *true'
expect "GetEntry shows validation by name" "$out" "VALIDATION_PASSED"
echo "grpcurl checks passed"
