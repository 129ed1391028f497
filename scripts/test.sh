#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test suite (ctest), then the
# checking build: clang-16 with -Werror=thread-safety, AddressSanitizer and
# UndefinedBehaviorSanitizer, its unit/kernels/integration/client suites and
# the libFuzzer targets (docs/testing.md says what and why). GPU tests print
# "skipped: no CUDA device" where there is none. Exits non-zero when any stage
# fails; ends with the time each stage took.
#
#   GPUTUNE_JOBS=2          parallel compile and test jobs
#   GPUTUNE_CHECK=0         skip the checking build (the gcc build and ctest only)
#   GPUTUNE_FUZZ_SECONDS=30 how long each fuzz target runs
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
jobs=${GPUTUNE_JOBS:-2}
check=${GPUTUNE_CHECK:-1}
fuzz_seconds=${GPUTUNE_FUZZ_SECONDS:-30}
check_dir=$root/build-check
san_logs=$check_dir/sanitizer-logs
fuzzers=(key_text entry_lines tool_file config_file resp_reader)

timings=()
print_timings() {
  echo "--- test.sh stages (load $(cut -d' ' -f1-3 /proc/loadavg)):"
  printf '  %s\n' "${timings[@]}"
}
# run_stage NAME COMMAND...: runs COMMAND with `set -e` in force (a function
# called behind `||` would run without it, so it runs as a job), records its
# time, and stops the script with the timings when it fails.
run_stage() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "=== $name"
  "$@" &
  wait $! || rc=$?
  timings+=("$(printf '%-34s %5ds%s' "$name" $((SECONDS - start)) \
    "$( ((rc == 0)) || echo "  FAILED (exit $rc)")")")
  if ((rc != 0)); then
    print_timings
    exit "$rc"
  fi
}

gcc_tests() {
  cd "$root/build"
  ctest -j "$jobs" --output-on-failure --timeout 300
  # ctest hides the GPU suite's skip notices: say them here.
  if [[ -x tests/gpu/gputune_gpu_tests ]]; then
    local skipped
    skipped=$(./tests/gpu/gputune_gpu_tests 2>&1 | grep -c "skipped: no CUDA device" || true)
    if [[ "$skipped" -gt 0 ]]; then
      echo "GPU suite: $skipped test cases skipped: no CUDA device"
    fi
  fi
}

# The checking build: CUDA off (nvcc's host pass is not clang's), no
# benchmarks, only what its tests need, and no optimisation: the
# sanitizers and the thread-safety analysis check unoptimised code as well,
# and clang compiles a gRPC-heavy unit with them in a third of -O1's time
# (docs/testing.md, "Build time").
check_build() {
  local flags="-O0 -g1 -DNDEBUG"
  CC=clang-16 CXX=clang++-16 GPUTUNE_BUILD_DIR=$check_dir \
    GPUTUNE_TARGETS="gputune_unit_test gputune_kernels_test gputune_integration_test
      gputune_client_tests gputuned gputunectl gputune_changelog
      ${fuzzers[*]/#/gputune_fuzz_}" \
    bash "$root/scripts/build.sh" -DGPUTUNE_CUDA=OFF -DGPUTUNE_BUILD_BENCH=OFF \
    -DGPUTUNE_SANITIZE=ON -DGPUTUNE_WERROR_THREAD_SAFETY=ON -DGPUTUNE_FUZZ=ON \
    -DGPUTUNE_UNITY_BUILD=ON "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$flags" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=$flags"
}

# Sanitizer settings for every instrumented process, the daemons the tests
# start included (they inherit the environment): stop at the first report and
# write it to $san_logs/<asan|ubsan>.<pid>, so a report from a child that
# its test did not notice still fails CI.
# The symbolizer is named outright: clang-16's runtime looks for
# /usr/bin/llvm-symbolizer-16 (package llvm-16, which install-deps.sh
# installs; clang-16 alone does not), and without it a process that must
# symbolize (LeakSanitizer matching a suppression) writes "invalid path to
# external symbolizer" and nothing else.
export_sanitizer_options() {
  local symbolizer
  symbolizer=$(command -v llvm-symbolizer-16 || command -v llvm-symbolizer || true)
  local sym=${symbolizer:+:external_symbolizer_path=$symbolizer}
  export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:log_path=$san_logs/asan$sym"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$san_logs/ubsan$sym"
  export LSAN_OPTIONS="suppressions=$root/tests/sanitizer/lsan.supp:print_suppressions=0"
}
# Fails (printing them) when any sanitizer report was written.
sanitizer_reports() {
  local reports=("$san_logs"/*)
  [[ -e "${reports[0]}" ]] || return 0
  echo "sanitizer reports (${#reports[@]}):"
  local f
  for f in "${reports[@]}"; do
    echo "--- $f"
    head -n 60 "$f"
  done
  return 1
}

check_tests() {
  rm -rf "$san_logs" && mkdir -p "$san_logs"
  export_sanitizer_options
  local rc=0
  # The fuzz labels replay each target's seed corpus.
  ctest --test-dir "$check_dir" -j "$jobs" --output-on-failure --timeout 600 \
    -L '^(unit|kernels|integration|client|fuzz)$' || rc=$?
  sanitizer_reports || rc=1
  return "$rc"
}

# Each target fuzzes for $fuzz_seconds, all at once (they are CPU-bound and
# time-bounded: running them together costs executions, not wall time). New
# inputs go to a scratch corpus, not the repo's seeds.
fuzz() {
  local work=$check_dir/fuzz-work name pids=() rc=0
  rm -rf "$work" "$san_logs" && mkdir -p "$san_logs"
  export_sanitizer_options
  for name in "${fuzzers[@]}"; do
    mkdir -p "$work/$name/new"
    "$check_dir/tests/fuzz/gputune_fuzz_$name" -max_total_time="$fuzz_seconds" \
      -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$work/$name/" "$work/$name/new" \
      "$root/tests/fuzz/corpus/$name" >"$work/$name/log" 2>&1 &
    pids+=($!)
  done
  local i
  for i in "${!fuzzers[@]}"; do
    name=${fuzzers[$i]}
    if wait "${pids[$i]}"; then
      echo "fuzz $name: $(grep -m1 -o 'stat::number_of_executed_units: [0-9]*' \
        "$work/$name/log" | grep -o '[0-9]*$') runs in ${fuzz_seconds}s, no crash"
    else
      rc=1
      echo "fuzz $name FAILED: $(ls "$work/$name" | grep -v -e '^new$' -e '^log$' | tr '\n' ' ')"
      tail -n 40 "$work/$name/log"
    fi
  done
  sanitizer_reports || rc=1
  return "$rc"
}

# start_beside NAME LOG COMMAND...: runs COMMAND as a job, its output into
# the file LOG, while the script goes on; finish_beside waits for it, prints
# the log and records its time (and stops the script when it failed). One
# job at a time.
# BESIDE_ON_EXIT=wait: when the script stops early, it waits for the job
# rather than stopping it (apt stopped half-way leaves dpkg broken).
start_beside() {
  beside_name=$1 beside_log=$2 beside_start=$SECONDS
  beside_on_exit=${BESIDE_ON_EXIT:-kill}
  shift 2
  mkdir -p "$(dirname "$beside_log")"
  set -m # its own process group, so stop_beside reaches its children too
  # The subshell notes when the job ended (set -e still in force in it), so
  # its own time is what is recorded, not the wait for the stage before.
  rm -f "$beside_log.end"
  (
    trap 'echo "$SECONDS" >"$beside_log.end"' EXIT
    "$@"
  ) >"$beside_log" 2>&1 &
  beside_pid=$!
  set +m
  trap stop_beside EXIT
}
# Stops the job beside when the script ends before finish_beside.
stop_beside() {
  [[ -n "${beside_pid:-}" ]] || return 0
  if [[ "$beside_on_exit" == wait ]]; then
    echo "test.sh: waiting for '$beside_name' to finish (log: $beside_log)" >&2
    wait "$beside_pid" || true
  else
    kill -- "-$beside_pid" 2>/dev/null || true
  fi
}
finish_beside() {
  local rc=0
  wait "$beside_pid" || rc=$?
  beside_pid=
  echo "=== $beside_name (ran beside the stage before; its output follows)"
  cat "$beside_log"
  local end
  end=$(cat "$beside_log.end" 2>/dev/null || echo "$SECONDS")
  timings+=("$(printf '%-34s %5ds  (beside the stage before)%s' "$beside_name" \
    $((end - beside_start)) "$( ((rc == 0)) || echo "  FAILED (exit $rc)")")")
  if ((rc != 0)); then
    print_timings
    exit "$rc"
  fi
}

# What the build and its configure step need first; the rest of the test
# dependencies (PyTorch, clang, PostgreSQL, Redis, lintian...) only when the
# tests run, so apt installs them while the gcc build compiles.
run_stage "install build dependencies" bash "$root/scripts/install-deps.sh" --test-configure
BESIDE_ON_EXIT=wait start_beside "install test dependencies" "$root/build/install-test-deps.log" \
  bash "$root/scripts/install-deps.sh" --test
# Both builds compile in unity batches (GPUTUNE_UNITY_BUILD, CMakeLists.txt):
# about a third less compile time cold.
run_stage "gcc build" bash "$root/scripts/build.sh" -DGPUTUNE_UNITY_BUILD=ON
finish_beside
if [[ "$check" != 0 ]]; then
  # Both builds first: compiling competes with the tests for the CPU.
  run_stage "clang check build" check_build
  # The two test runs spend most of their time waiting on daemons and
  # sockets, and share nothing (own build folders, temporary directories),
  # so they run side by side.
  start_beside "sanitizer ctest" "$check_dir/sanitizer-ctest.log" check_tests
fi
run_stage "gcc ctest" gcc_tests
if [[ "$check" != 0 ]]; then
  finish_beside
  run_stage "fuzz (${#fuzzers[@]} targets x ${fuzz_seconds}s)" fuzz
fi
print_timings
