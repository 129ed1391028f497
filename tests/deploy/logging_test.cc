// gputuned's logs under systemd (journald) and on a console, and changing the
// log level of a running daemon.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>

#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/deploy/service_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

using std::chrono::seconds;

// "<device>:<inode>" of `path`, as systemd puts that of the journal stream it
// connects to stderr in $JOURNAL_STREAM.
std::string StreamId(const std::string& path) {
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(line);
  }
  return lines;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

// A daemon on <dir>/gpu.sock with `flags` and `env`; waits until it logs
// that it serves.
Service ServingDaemon(const TempDir& dir, std::vector<std::string> flags,
                      std::map<std::string, std::string> env = {}) {
  std::vector<std::string> args = {
      "--listen=unix://" + dir.path() + "/gpu.sock",
      "--db=" + dir.path() + "/gpu.db", "--backend=none"};
  args.insert(args.end(), flags.begin(), flags.end());
  return Service(args, env, dir.path());
}

const std::regex kTimestamp(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)");

TEST_CASE(
    "under journald lines carry a syslog priority and no timestamp of their "
    "own") {
  TempDir dir;
  const std::string log = dir.path() + "/gputuned.log";
  WriteFile(log, "");
  Service daemon = ServingDaemon(dir, {}, {{"JOURNAL_STREAM", StreamId(log)}});
  REQUIRE(daemon.WaitForLog("serving on", seconds(20)));

  const std::vector<std::string> lines = Lines(daemon.Log());
  INFO(daemon.Log());
  REQUIRE_FALSE(lines.empty());
  for (const std::string& line : lines) {
    CHECK(std::regex_search(line, std::regex("^<[0-7]>")));
    CHECK_FALSE(std::regex_search(line, kTimestamp));
  }
  // info is priority 6, warn 4 (--backend=none warns that it cannot tune).
  CHECK_THAT(
      daemon.Log(),
      Catch::Contains("<6>gputuned " GPUTUNE_PROJECT_VERSION " serving on"));
  CHECK_THAT(daemon.Log(), Catch::Contains("<4>started with --backend=none"));
}

TEST_CASE(
    "an inherited $JOURNAL_STREAM that is not the daemon's stderr gives "
    "console lines") {
  TempDir dir;
  Service daemon = ServingDaemon(dir, {}, {{"JOURNAL_STREAM", "8:12345"}});
  REQUIRE(daemon.WaitForLog("serving on", seconds(20)));
  INFO(daemon.Log());
  for (const std::string& line : Lines(daemon.Log())) {
    CHECK(std::regex_search(line, kTimestamp));
  }
}

TEST_CASE("on a console lines carry a timestamp and the level") {
  unsetenv("JOURNAL_STREAM");  // in case the tests themselves run under systemd
  TempDir dir;
  Service daemon = ServingDaemon(dir, {});
  REQUIRE(daemon.WaitForLog("serving on", seconds(20)));
  INFO(daemon.Log());
  CHECK(std::regex_search(
      daemon.Log(),
      std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} info gputuned)")));
}

// A serving daemon started with --config=<dir>/gputuned.conf.
struct ConfiguredDaemon {
  explicit ConfiguredDaemon(const std::string& text)
      : config(dir.path() + "/gputuned.conf"),
        daemon(Start(dir, config, text)) {
    REQUIRE(daemon.WaitForLog("serving on", seconds(20)));
  }
  static Service Start(const TempDir& dir, const std::string& config,
                       const std::string& text) {
    WriteFile(config, text);
    return ServingDaemon(dir, {"--config=" + config});
  }
  // Rewrites the config file and sends SIGHUP, as `systemctl reload` does.
  void Reload(const std::string& text) {
    WriteFile(config, text);
    daemon.Signal(SIGHUP);
  }

  TempDir dir;
  std::string config;
  Service daemon;
};

TEST_CASE("SIGHUP re-reads log_level from the config file, without a restart") {
  ConfiguredDaemon configured("log_level = info\n");
  Service& daemon = configured.daemon;
  const pid_t pid = daemon.pid();

  configured.Reload("log_level = debug\nautotune_log = full\n");
  INFO(daemon.Log());
  CHECK(daemon.WaitForLog(
      "configuration reloaded: log_level=debug autotune_log=full",
      seconds(10)));
  CHECK(daemon.pid() == pid);
  CHECK(GetStatusNow(configured.dir.path() + "/gpu.sock").ok());
}

TEST_CASE("a config file broken at SIGHUP keeps the settings in force") {
  ConfiguredDaemon configured("log_level = info\n");
  Service& daemon = configured.daemon;

  configured.Reload("log_level = loud\n");
  INFO(daemon.Log());
  CHECK(daemon.WaitForLog("SIGHUP: config not reloaded", seconds(10)));
  CHECK_THAT(daemon.Log(), Catch::Contains("log_level=loud"));
  CHECK(GetStatusNow(configured.dir.path() + "/gpu.sock").ok());
}

TEST_CASE("AdminService.SetLogLevel changes the level without a restart") {
  TempDir dir;
  Service daemon = ServingDaemon(dir, {});
  REQUIRE(daemon.WaitForLog("serving on", seconds(20)));
  auto admin = v1::AdminService::NewStub(
      grpc::CreateChannel("unix://" + dir.path() + "/gpu.sock",
                          grpc::InsecureChannelCredentials()));

  grpc::ClientContext ctx;
  v1::SetLogLevelRequest request;
  request.set_level("debug");
  v1::SetLogLevelResponse response;
  REQUIRE(admin->SetLogLevel(&ctx, request, &response).ok());
  CHECK(response.level() == "debug");
  INFO(daemon.Log());
  CHECK(daemon.WaitForLog("log level set to debug", seconds(10)));
}

}  // namespace
}  // namespace gputune::testing
