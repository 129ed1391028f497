// gputuned's side of the systemd service protocol (Type=notify, WatchdogSec=),
// checked against a fake $NOTIFY_SOCKET: what systemd would receive, and when.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>

#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/deploy/service_support.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// A daemon on <dir>/gpu.sock and <dir>/gpu.db that notifies `notify`.
Service NotifyingDaemon(const TempDir& dir, const NotifySocket& notify,
                        std::vector<std::string> flags,
                        std::map<std::string, std::string> env = {}) {
  std::vector<std::string> args = {
      "--listen=unix://" + dir.path() + "/gpu.sock",
      "--db=" + dir.path() + "/gpu.db"};
  args.insert(args.end(), flags.begin(), flags.end());
  env["NOTIFY_SOCKET"] = notify.path();
  return Service(args, env, dir.path());
}

// Records one entry through Claim + Record, as a client that tuned it would.
void RecordOneEntry(const std::string& socket_path) {
  auto stub = v1::TuneService::NewStub(grpc::CreateChannel(
      "unix://" + socket_path, grpc::InsecureChannelCredentials()));
  v1::ClaimRequest claim;
  *claim.mutable_key() = DenseKey(8);
  claim.set_holder("deploy test");
  v1::ClaimResponse granted;
  grpc::ClientContext claim_ctx;
  REQUIRE(stub->Claim(&claim_ctx, claim, &granted).ok());
  REQUIRE(granted.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  v1::RecordRequest record;
  record.set_claim_id(granted.claim().claim_id());
  record.mutable_execution()->set_kernel("host.blocked");
  v1::RecordResponse recorded;
  grpc::ClientContext record_ctx;
  const grpc::Status s = stub->Record(&record_ctx, record, &recorded);
  INFO(s.error_message());
  REQUIRE(s.ok());
}

TEST_CASE("READY=1 is sent once the daemon answers RPCs, with a STATUS line") {
  TempDir dir;
  NotifySocket notify(dir.path());
  Service daemon = NotifyingDaemon(dir, notify, {"--backend=none"});

  std::vector<Notification> before;
  const std::optional<Notification> ready =
      notify.ReceiveUntil("READY=1", seconds(20), &before);
  INFO(daemon.Log());
  REQUIRE(ready);
  CHECK(before.empty());
  // No retry, no waiting for the channel: it answers the moment READY=1 is in.
  const grpc::Status status = GetStatusNow(dir.path() + "/gpu.sock");
  INFO(status.error_message());
  CHECK(status.ok());
  const std::string line = ready->Field("STATUS");
  CHECK_THAT(line, Catch::Contains("device 0"));
  CHECK_THAT(line, Catch::Contains("0 entries"));
  CHECK_THAT(line, Catch::Contains("queue 0/256"));
}

TEST_CASE("READY=1 waits for the database to be loaded") {
  TempDir dir;
  NotifySocket notify(dir.path());
  Service daemon = NotifyingDaemon(dir, notify, {"--backend=host"});
  REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
  RecordOneEntry(dir.path() + "/gpu.sock");
  REQUIRE(WIFEXITED(daemon.Terminate()));

  daemon.Start();
  const std::optional<Notification> ready =
      notify.ReceiveUntil("READY=1", seconds(20));
  INFO(daemon.Log());
  REQUIRE(ready);
  CHECK_THAT(ready->Field("STATUS"), Catch::Contains("1 entries"));
}

TEST_CASE(
    "WATCHDOG=1 comes every --watchdog_interval while the daemon is alive") {
  TempDir dir;
  NotifySocket notify(dir.path());
  Service daemon = NotifyingDaemon(
      dir, notify, {"--backend=none", "--watchdog_interval=200ms"});
  const std::optional<Notification> ready =
      notify.ReceiveUntil("READY=1", seconds(20));
  INFO(daemon.Log());
  REQUIRE(ready);

  std::vector<Notification> pings;
  while (pings.size() < 6) {
    std::optional<Notification> n = notify.Receive(seconds(2));
    REQUIRE(n);
    REQUIRE(n->Has("WATCHDOG=1"));
    CHECK_THAT(n->Field("STATUS"), Catch::Contains("entries"));
    pings.push_back(*n);
  }
  // The first ping one interval after READY=1, the others one apart; wide
  // bounds, for a loaded 2-core machine.
  auto ms = [](auto d) {
    return std::chrono::duration_cast<milliseconds>(d).count();
  };
  CHECK(ms(pings[0].received - ready->received) >= 150);
  const auto total = ms(pings.back().received - pings.front().received);
  CHECK(total >= 5 * 180);
  CHECK(total <= 5 * 400);
}

TEST_CASE(
    "the watchdog stops pinging while the daemon does not answer on its "
    "socket") {
  TempDir dir;
  NotifySocket notify(dir.path());
  Service daemon = NotifyingDaemon(
      dir, notify, {"--backend=none", "--watchdog_interval=200ms"});
  REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
  REQUIRE(notify.ReceiveUntil("WATCHDOG=1", seconds(2)));
  // The process and its threads are fine, but no client can reach it: what
  // a listener that stopped accepting looks like from outside.
  REQUIRE(std::filesystem::remove(dir.path() + "/gpu.sock"));
  // A ping already on its way may arrive; none after that.
  (void)notify.ReceiveUntil("WATCHDOG=1", milliseconds(300));
  const std::optional<Notification> late =
      notify.ReceiveUntil("WATCHDOG=1", milliseconds(1500));
  INFO(daemon.Log());
  CHECK_FALSE(late);
  CHECK(daemon.WaitForLog("watchdog: gputuned is unhealthy", seconds(5)));
}

TEST_CASE(
    "without --watchdog_interval the daemon pings at half of $WATCHDOG_USEC") {
  TempDir dir;
  NotifySocket notify(dir.path());
  Service daemon = NotifyingDaemon(dir, notify, {"--backend=none"},
                                   {{"WATCHDOG_USEC", "600000"}});
  REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
  const std::optional<Notification> first =
      notify.ReceiveUntil("WATCHDOG=1", seconds(2));
  const std::optional<Notification> second =
      notify.ReceiveUntil("WATCHDOG=1", seconds(2));
  INFO(daemon.Log());
  REQUIRE(first);
  REQUIRE(second);
  const auto gap = std::chrono::duration_cast<milliseconds>(second->received -
                                                            first->received);
  CHECK(gap.count() >= 250);
  CHECK(gap.count() <= 600);
  CHECK_THAT(daemon.Log(), Catch::Contains("pinging every 300ms"));
}

TEST_CASE("SIGTERM sends STOPPING=1, removes the socket and exits 0") {
  TempDir dir;
  NotifySocket notify(dir.path());
  Service daemon = NotifyingDaemon(
      dir, notify, {"--backend=none", "--watchdog_interval=100ms"});
  REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
  REQUIRE(std::filesystem::exists(dir.path() + "/gpu.sock"));

  daemon.Signal(SIGTERM);
  const std::optional<Notification> stopping =
      notify.ReceiveUntil("STOPPING=1", seconds(10));
  const int status = daemon.Terminate();
  INFO(daemon.Log());
  REQUIRE(stopping);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/gpu.sock"));
}

TEST_CASE("without $NOTIFY_SOCKET the daemon serves and notifies nobody") {
  unsetenv("NOTIFY_SOCKET");  // in case the tests themselves run under systemd
  TempDir dir;
  const std::string socket = dir.path() + "/gpu.sock";
  Service daemon({"--listen=unix://" + socket, "--db=" + dir.path() + "/gpu.db",
                  "--backend=none", "--watchdog_interval=100ms"},
                 {}, dir.path());
  REQUIRE(daemon.WaitForLog("serving on", seconds(20)));
  CHECK(GetStatusNow(socket).ok());
  CHECK_THAT(daemon.Log(), !Catch::Contains("watchdog"));
  const int status = daemon.Terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace gputune::testing
