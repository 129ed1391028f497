// gputune-sync (the binary) against real gputuned processes: the ranks of a
// host start with one file written from the daemon, each row a job adds is
// imported once, a killed job loses at most one interval, and through the
// fleet tier the next host starts with what the first one tuned. COMMAND is
// a small shell script that appends rows to the file as a tuner would.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/gputunectl/cli.h"
#include "proto/key_format.h"
#include "tests/client/client_test_support.h"
#include "tests/fleet/fleet_test_support.h"
#include "tests/support/catch.h"
#include "tests/support/metrics_text.h"

namespace gputune::testing {
namespace {

using Steady = std::chrono::steady_clock;

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

// Polls `pred` every 50 ms for up to `seconds` (generous: the suite runs on
// busy machines too).
bool WaitFor(const std::function<bool()>& pred, int seconds = 60) {
  const auto give_up = Steady::now() + std::chrono::seconds(seconds);
  while (Steady::now() < give_up) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

// A TunableOp file's validators, and one row per GEMM size `m`.
constexpr char kValidators[] =
    "Validator,PT_VERSION,2.5.0\nValidator,GCN_ARCH_NAME,gfx942\n";
std::string Row(int m) {
  return absl::StrCat("GemmTunableOp_float_NN,nn_", m, "_64_64_ld_64_64_64,",
                      "Gemm_Rocblas_", m, ",0.", m, "5\n");
}
std::string ParamsOf(int m) {
  return absl::StrCat("GemmTunableOp_float_NN,nn_", m, "_64_64_ld_64_64_64");
}

// The tunableop entries `daemon` holds, by params.
std::map<std::string, v1::Entry> Tunableop(const DaemonProcess& daemon) {
  auto client = ClientOf(daemon);
  v1::ListEntriesRequest request;
  request.set_page_size(1000);
  request.mutable_filter()->set_op("tunableop");
  absl::StatusOr<v1::ListEntriesResponse> page = client->ListEntries(request);
  REQUIRE(page.ok());
  std::map<std::string, v1::Entry> out;
  for (const v1::Entry& e : page->entries()) out[e.key().custom().params()] = e;
  return out;
}

// Entry changes the daemon has published (gputune_changes_published_total):
// one per entry an import writes.
double ChangesPublished(const DaemonProcess& daemon) {
  v1::GetMetricsResponse resp;
  grpc::ClientContext ctx;
  REQUIRE(daemon.AdminStub()->GetMetrics(&ctx, {}, &resp).ok());
  for (const auto& [series, value] : Samples(resp.text())) {
    if (series.rfind("gputune_changes_published_total", 0) == 0) return value;
  }
  FAIL("no gputune_changes_published_total");
  return 0;
}

// Starts gputune-sync with `args` (then "--" and `command`), its stdout and
// stderr appended to `log`, $GPUTUNE_ENDPOINT set to `endpoint` and `env`
// added. Returns its pid; the caller reaps it.
pid_t StartSync(const std::string& endpoint, std::vector<std::string> args,
                const std::vector<std::string>& command, const std::string& log,
                const std::map<std::string, std::string>& env = {}) {
  args.insert(args.begin(), GPUTUNE_SYNC_PATH);
  args.push_back("--");
  args.insert(args.end(), command.begin(), command.end());
  std::fflush(nullptr);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    setenv("GPUTUNE_ENDPOINT", endpoint.c_str(), 1);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    FILE* out = std::fopen(log.c_str(), "a");
    if (out != nullptr) {
      dup2(fileno(out), 1);
      dup2(fileno(out), 2);
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to 120 s for `pid` to exit; its exit code (128 + the signal when
// one ended it). One that does not exit in time is killed and the test
// fails.
int Reap(pid_t pid) {
  int status = 0;
  pid_t reaped = 0;
  WaitFor([&] { return (reaped = waitpid(pid, &status, WNOHANG)) != 0; }, 120);
  if (reaped == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("gputune-sync did not exit within 120 s");
  }
  REQUIRE(reaped == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A COMMAND: /bin/sh running `script` with $1 = `arg`.
std::vector<std::string> ShCommand(const std::string& dir,
                                   const std::string& script,
                                   const std::string& arg) {
  const std::string path = dir + "/command.sh";
  WriteFile(path, script);
  return {"/bin/sh", path, arg};
}

// What every rank's COMMAND does: keep the file it was started with, wait
// until all 8 have (so that no rank sees another's rows), add one row of its
// own as a tuner would, and exit with its rank.
constexpr char kRankScript[] = R"sh(
rank=$1
cp "$CACHE" "$OUT/start.$rank" || exit 90
: > "$OUT/ready.$rank"
tries=0
while [ "$(ls "$OUT" | grep -c '^ready\.')" -lt 8 ]; do
  tries=$((tries + 1)); [ $tries -gt 1200 ] && exit 91
  sleep 0.1
done
printf 'GemmTunableOp_float_NN,nn_%s_64_64_ld_64_64_64,Gemm_Rocblas_%s,0.%s5\n' \
  $((100 + rank)) $((100 + rank)) $((100 + rank)) >> "$CACHE"
exit $rank
)sh";

TEST_CASE(
    "eight gputune-sync ranks on one host start with byte-identical files "
    "and import each new row once") {
  DaemonProcess daemon({"--backend=none"});
  const std::string dir = daemon.dir();
  const std::string seed = dir + "/seed.csv";
  WriteFile(seed, std::string(kValidators) + Row(1) + Row(2) + Row(3));
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", seed}).exit_code ==
          ctl::kExitOk);
  const std::string expected = dir + "/expected.csv";
  REQUIRE(
      RunCtl(daemon, {"export", "--format=tunableop", expected}).exit_code ==
      ctl::kExitOk);
  const double changes_before = ChangesPublished(daemon);

  const std::string cache = dir + "/tunableop_results.csv";
  const std::string out = dir + "/ranks";
  std::filesystem::create_directory(out);
  const std::vector<std::string> command = ShCommand(dir, kRankScript, "");
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 8; ++rank) {
    std::vector<std::string> rank_command = command;
    rank_command.back() = std::to_string(rank);
    ranks.push_back(StartSync(
        daemon.endpoint(),
        {"--format=tunableop", "--path=" + cache, "--interval=200ms"},
        rank_command, dir + "/sync.log", {{"CACHE", cache}, {"OUT", out}}));
  }
  for (int rank = 0; rank < 8; ++rank) {
    INFO(ReadFile(dir + "/sync.log"));
    CHECK(Reap(ranks[rank]) == rank);  // COMMAND's exit code
  }
  INFO(ReadFile(dir + "/sync.log"));
  // One file, written once before any rank started: every rank got it.
  for (int rank = 0; rank < 8; ++rank) {
    REQUIRE(ReadFile(out + "/start." + std::to_string(rank)) ==
            ReadFile(expected));
  }
  // Each rank's row is an entry now, imported once.
  const std::map<std::string, v1::Entry> entries = Tunableop(daemon);
  CHECK(entries.size() == 11);
  for (int rank = 0; rank < 8; ++rank) {
    CHECK(entries.count(ParamsOf(100 + rank)) == 1);
  }
  CHECK(ChangesPublished(daemon) - changes_before == 8);
  CHECK(ReadFile(cache + ".gputune-sync.seen") == ReadFile(cache));
}

// COMMAND for the kill tests: adds row $1, waits for the file "go", adds
// row $1 + 1, says so and runs until it is killed.
constexpr char kKilledScript[] = R"sh(
echo $$ > "$OUT/pid"
printf 'GemmTunableOp_float_NN,nn_%s_64_64_ld_64_64_64,Gemm_Rocblas_%s,0.%s5\n' \
  $1 $1 $1 >> "$CACHE"
tries=0
while [ ! -e "$OUT/go" ]; do
  tries=$((tries + 1)); [ $tries -gt 1200 ] && exit 91
  sleep 0.1
done
next=$(($1 + 1))
printf 'GemmTunableOp_float_NN,nn_%s_64_64_ld_64_64_64,Gemm_Rocblas_%s,0.%s5\n' \
  $next $next $next >> "$CACHE"
: > "$OUT/second"
exec sleep 120
)sh";

pid_t PidIn(const std::string& path) {
  pid_t pid = 0;
  REQUIRE(WaitFor([&] {
    std::ifstream(path) >> pid;
    return pid > 0;
  }));
  return pid;
}

TEST_CASE(
    "kill -9 of COMMAND: what it added before gputune-sync's last interval "
    "was imported while it ran and the rest when it died") {
  DaemonProcess daemon({"--backend=none"});
  const std::string dir = daemon.dir();
  const std::string cache = dir + "/cache.csv";
  WriteFile(cache, kValidators);
  const pid_t sync =
      StartSync(daemon.endpoint(),
                {"--format=tunableop", "--path=" + cache, "--interval=300ms"},
                ShCommand(dir, kKilledScript, "40"), dir + "/sync.log",
                {{"CACHE", cache}, {"OUT", dir}});
  INFO(ReadFile(dir + "/sync.log"));
  // The first row is imported at an interval, COMMAND still running.
  REQUIRE(WaitFor([&] { return Tunableop(daemon).count(ParamsOf(40)) == 1; }));
  const pid_t command = PidIn(dir + "/pid");
  REQUIRE(kill(command, 0) == 0);
  WriteFile(dir + "/go", "");
  REQUIRE(WaitFor([&] { return Exists(dir + "/second"); }));
  REQUIRE(kill(command, SIGKILL) == 0);
  CHECK(Reap(sync) == 128 + SIGKILL);
  // The second row, added after the last interval, went in as COMMAND died.
  const std::map<std::string, v1::Entry> entries = Tunableop(daemon);
  CHECK(entries.size() == 2);
  CHECK(entries.count(ParamsOf(41)) == 1);
}

TEST_CASE(
    "kill -9 of gputune-sync and COMMAND: the next job imports what the "
    "killed one added before its file is written again") {
  DaemonProcess daemon({"--backend=none"});
  const std::string dir = daemon.dir();
  const std::string cache = dir + "/cache.csv";
  // The daemon holds a row of this version already, so the next job's file
  // is written from the daemon (over what the killed job left).
  WriteFile(cache, std::string(kValidators) + Row(7));
  REQUIRE(RunCtl(daemon, {"import", "--format=tunableop", cache}).exit_code ==
          ctl::kExitOk);
  const pid_t sync =
      StartSync(daemon.endpoint(),
                {"--format=tunableop", "--path=" + cache, "--interval=1h"},
                ShCommand(dir, kKilledScript, "50"), dir + "/sync.log",
                {{"CACHE", cache}, {"OUT", dir}});
  INFO(ReadFile(dir + "/sync.log"));
  const pid_t command = PidIn(dir + "/pid");
  WriteFile(dir + "/go", "");
  REQUIRE(WaitFor([&] { return Exists(dir + "/second"); }));
  REQUIRE(kill(sync, SIGKILL) == 0);
  CHECK(Reap(sync) == 128 + SIGKILL);
  REQUIRE(kill(command, SIGKILL) == 0);
  // No interval went by: the rows are in the file only.
  REQUIRE(Tunableop(daemon).size() == 1);

  const pid_t next =
      StartSync(daemon.endpoint(), {"--format=tunableop", "--path=" + cache},
                {"/bin/sh", "-c", "cp \"$CACHE\" \"$OUT/next\""},
                dir + "/sync.log", {{"CACHE", cache}, {"OUT", dir}});
  CHECK(Reap(next) == 0);
  const std::map<std::string, v1::Entry> entries = Tunableop(daemon);
  CHECK(entries.size() == 3);
  // The next job started with all three.
  CHECK(ReadFile(dir + "/next") ==
        std::string(kValidators) + Row(50) + Row(51) + Row(7));
}

TEST_CASE("gputune-sync passes signals on and returns COMMAND's exit code") {
  DaemonProcess daemon({"--backend=none"});
  const std::string dir = daemon.dir();
  const std::string cache = dir + "/cache.csv";
  const pid_t sync =
      StartSync(daemon.endpoint(), {"--format=tunableop", "--path=" + cache},
                ShCommand(dir,
                          "trap 'echo term > \"$OUT/got\"; exit 3' TERM\n"
                          "echo $$ > \"$OUT/pid\"\n"
                          "tries=0\n"
                          "while [ $tries -lt 1200 ]; do tries=$((tries + 1)); "
                          "sleep 0.1; done\n"
                          "exit 91\n",
                          ""),
                dir + "/sync.log", {{"CACHE", cache}, {"OUT", dir}});
  INFO(ReadFile(dir + "/sync.log"));
  PidIn(dir + "/pid");
  REQUIRE(kill(sync, SIGTERM) == 0);
  CHECK(Reap(sync) == 3);
  CHECK(ReadFile(dir + "/got") == "term\n");

  std::string output;
  CHECK(RunProgram(
            GPUTUNE_SYNC_PATH,
            {"--format=tunableop", "--path=" + cache,
             "--endpoint=" + daemon.endpoint(), "--", dir + "/no-such-command"},
            &output) == 127);
  CHECK(output.find("cannot run") != std::string::npos);
  CHECK(RunProgram(GPUTUNE_SYNC_PATH,
                   {"--format=csv", "--path=x", "--", "true"}, &output) == 2);
  CHECK(RunProgram(GPUTUNE_SYNC_PATH, {"--help"}, &output) == 0);
  CHECK(output.find("EXIT STATUS") != std::string::npos);
}

TEST_CASE(
    "through the fleet tier a second host's ranks start with what the first "
    "host's job tuned") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("sync");
  const std::vector<std::string> flags = {
      "--backend=host", "--fleet=" + conninfo, "--fleet_poll_interval=200ms",
      "--autotune_log=disabled"};
  DaemonProcess a(flags);
  DaemonProcess b(flags);
  auto connected = [](const DaemonProcess& d) {
    v1::GetStatusResponse status;
    grpc::ClientContext ctx;
    return d.Stub()->GetStatus(&ctx, {}, &status).ok() &&
           status.fleet().connected();
  };
  REQUIRE(WaitFor([&] { return connected(a) && connected(b); }));

  // Host a: the job tunes two GEMMs.
  const std::string cache_a = a.dir() + "/tunableop_results.csv";
  WriteFile(cache_a, kValidators);
  const pid_t job_a =
      StartSync(a.endpoint(), {"--format=tunableop", "--path=" + cache_a},
                {"/bin/sh", "-c",
                 absl::StrCat("printf '", Row(60), Row(61), "' >> \"$CACHE\"")},
                a.dir() + "/sync.log", {{"CACHE", cache_a}});
  INFO(ReadFile(a.dir() + "/sync.log"));
  REQUIRE(Reap(job_a) == 0);
  REQUIRE(Tunableop(a).size() == 2);
  for (const auto& [params, e] : Tunableop(a)) {
    CHECK(e.source() == v1::SOURCE_IMPORTED);
  }

  // Host b: its daemon has them from the fleet, and its job starts with
  // the file host a's daemon writes.
  REQUIRE(WaitFor([&] { return Tunableop(b).size() == 2; }));
  for (const auto& [params, e] : Tunableop(b)) {
    CHECK(e.source() == v1::SOURCE_FLEET);
  }
  const std::string expected = a.dir() + "/expected.csv";
  REQUIRE(RunCtl(a, {"export", "--format=tunableop", expected}).exit_code ==
          ctl::kExitOk);
  const std::string cache_b = b.dir() + "/tunableop_results.csv";
  const pid_t job_b =
      StartSync(b.endpoint(), {"--format=tunableop", "--path=" + cache_b},
                {"/bin/sh", "-c", "cp \"$CACHE\" \"$CACHE.start\""},
                b.dir() + "/sync.log", {{"CACHE", cache_b}});
  INFO(ReadFile(b.dir() + "/sync.log"));
  REQUIRE(Reap(job_b) == 0);
  CHECK(ReadFile(cache_b + ".start") == ReadFile(expected));
  CHECK(ReadFile(expected) == std::string(kValidators) + Row(60) + Row(61));
}

}  // namespace
}  // namespace gputune::testing
