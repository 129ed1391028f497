// A client facing a stopped, hung or restarted daemon: every call returns
// within its deadline, the breaker stops paying the deadline again, and the
// client reconnects by itself.
#include <signal.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"
#include "tests/support/sanitized.h"

namespace gputune::testing {
namespace {

using Clock = std::chrono::steady_clock;

// SIGSTOP, and wait until the process is stopped (kill only queues it).
void Freeze(pid_t pid) {
  REQUIRE(kill(pid, SIGSTOP) == 0);
  REQUIRE(Eventually([pid] {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string pid_field, comm, state;
    stat >> pid_field >> comm >> state;
    return state == "T";
  }));
}

// What a loaded machine may add to a call that ends at its deadline: the
// thread that sees the deadline pass waits to be scheduled. A call that
// ignored its deadline would wait for the stopped daemon for ever; one that
// waited when it need not shows in its status (DEADLINE_EXCEEDED where
// UNAVAILABLE is due) and in the lower bounds, which load cannot break.
constexpr double kSlackMs = 2000.0 * kSlowdown;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

TEST_CASE("a client facing a stopped daemon fails fast and recovers") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.lookup_deadline = absl::Milliseconds(200);
  auto client = ClientOf(daemon, options);
  const v1::Key key = CustomKey("down=1");
  REQUIRE(client->Lookup(key).ok());

  daemon.Kill();
  for (int i = 0; i < 20; ++i) {
    const auto start = Clock::now();
    absl::StatusOr<LookupResult> r = client->Lookup(key);
    REQUIRE(MsSince(start) < 200 + kSlackMs);
    REQUIRE(r.status().code() == absl::StatusCode::kUnavailable);
  }
  absl::StatusOr<LookupResult> r = client->Lookup(key);
  // The message says what to check.
  INFO(r.status().message());
  REQUIRE(std::string(r.status().message()).find(daemon.endpoint()) !=
          std::string::npos);
  REQUIRE(std::string(r.status().message()).find("is gputuned running") !=
          std::string::npos);

  daemon.Start();  // same socket path
  const auto back = Clock::now();
  // By itself, well before gRPC's reconnect backoff would reach its 120 s
  // cap.
  REQUIRE(Eventually(
      [&] {
        absl::StatusOr<LookupResult> r = client->Lookup(key);
        return r.ok() && r->state() == v1::KEY_STATE_MISS;
      },
      std::chrono::milliseconds(30000)));
  INFO("recovered after " << MsSince(back) << " ms");
}

TEST_CASE(
    "a hung daemon costs one deadline, then the breaker answers at once") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.lookup_deadline = absl::Milliseconds(150);
  options.deadline = absl::Milliseconds(300);
  options.breaker_failures = 2;
  options.breaker_open_time = absl::Seconds(5);
  RpcCounter counter;
  auto client = ClientOf(daemon, options, &counter);
  const v1::Key key = CustomKey("hung=1");
  REQUIRE(client->Lookup(key).ok());

  Freeze(daemon.pid());
  for (int i = 0; i < 2; ++i) {
    const auto start = Clock::now();
    absl::StatusOr<LookupResult> r = client->Lookup(key);
    const double ms = MsSince(start);
    REQUIRE(r.status().code() == absl::StatusCode::kDeadlineExceeded);
    REQUIRE(ms >= 140);
    REQUIRE(ms < 150 + kSlackMs);
  }
  // The breaker is open (for 5 s, ample for these few calls however loaded
  // the machine): no more waiting for the deadline. The calls are refused
  // without an RPC; a stopped daemon would make any RPC wait out its
  // deadline and end DEADLINE_EXCEEDED.
  const int rpcs = counter.total();
  for (int i = 0; i < 50; ++i) {
    REQUIRE(client->Lookup(key).status().code() ==
            absl::StatusCode::kUnavailable);
  }
  // Other calls too, including a claim and the guard-free operator calls.
  REQUIRE_FALSE(client->Claim(key).ok());
  REQUIRE_FALSE(client->GetStatus().ok());
  REQUIRE(counter.total() == rpcs);
  REQUIRE(kill(daemon.pid(), SIGCONT) == 0);
  REQUIRE(Eventually([&] { return client->Lookup(key).ok(); },
                     std::chrono::milliseconds(30000)));
}

// 5,000 keys: a BatchLookup whose answer takes a while to read.
std::vector<v1::Key> FiveThousandKeys() {
  std::vector<v1::Key> keys;
  for (int i = 0; i < 5000; ++i) {
    keys.push_back(CustomKey("parts=" + std::to_string(i)));
  }
  return keys;
}

TEST_CASE("a BatchLookup is one call: one deadline, one failure") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.deadline = absl::Milliseconds(300);
  options.lookup_deadline = absl::Milliseconds(150);
  options.breaker_failures = 2;
  auto client = ClientOf(daemon, options);
  const std::vector<v1::Key> keys = FiveThousandKeys();
  REQUIRE(client->BatchLookup(keys).ok());

  Freeze(daemon.pid());
  auto start = Clock::now();
  absl::StatusOr<std::vector<LookupResult>> r = client->BatchLookup(keys);
  double ms = MsSince(start);
  REQUIRE(r.status().code() == absl::StatusCode::kDeadlineExceeded);
  INFO(r.status().message());
  // The deadline named is the call's.
  REQUIRE(std::string(r.status().message()).find("within 300ms") !=
          std::string::npos);
  REQUIRE(ms >= 290);
  REQUIRE(ms < 300 + kSlackMs);
  // The breaker counted one failure: the next call still goes to the
  // daemon (and waits for its deadline).
  start = Clock::now();
  REQUIRE(client->Lookup(keys[0]).status().code() ==
          absl::StatusCode::kDeadlineExceeded);
  ms = MsSince(start);
  REQUIRE(ms >= 140);
  REQUIRE(kill(daemon.pid(), SIGCONT) == 0);
}

TEST_CASE("after an outage, a BatchLookup is the one probe") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.deadline = absl::Milliseconds(300);
  options.breaker_failures = 1;
  options.breaker_open_time = absl::Milliseconds(200);
  auto client = ClientOf(daemon, options);
  const std::vector<v1::Key> keys = FiveThousandKeys();
  REQUIRE(client->BatchLookup(keys).ok());

  daemon.Kill();
  REQUIRE(client->BatchLookup(keys).status().code() ==
          absl::StatusCode::kUnavailable);  // the breaker opens
  daemon.Start();
  // Once the open time is over, the batch goes through as the probe.
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  absl::StatusOr<std::vector<LookupResult>> r;
  REQUIRE(Eventually(
      [&] {
        r = client->BatchLookup(keys);
        INFO(r.status().message());
        CHECK(r.status().message().find("checking again now") ==
              absl::string_view::npos);
        return r.ok();
      },
      std::chrono::milliseconds(10000)));
  REQUIRE(r->size() == keys.size());
}

TEST_CASE("a claim guard's destructor with the daemon down returns in time") {
  DaemonProcess daemon({"--backend=none"});
  ClientOptions options;
  options.deadline = absl::Milliseconds(300);
  auto client = ClientOf(daemon, options);
  const auto start = Clock::now();
  {
    absl::StatusOr<ClaimGuard> guard = client->Claim(CustomKey("gone=1"));
    REQUIRE(guard->granted());
    Freeze(daemon.pid());
  }  // the abandon cannot be answered
  REQUIRE(MsSince(start) < 300 + kSlackMs);
  REQUIRE(kill(daemon.pid(), SIGCONT) == 0);
}

TEST_CASE("a client created before its daemon starts connects later") {
  DaemonProcess daemon({"--backend=none"});
  const std::string endpoint = daemon.endpoint();
  daemon.Kill();
  ClientOptions options;
  options.endpoint = endpoint;
  auto client = Client::Create(options);
  REQUIRE(client.ok());  // no I/O at creation
  REQUIRE((*client)->Lookup(CustomKey("late=1")).status().code() ==
          absl::StatusCode::kUnavailable);
  daemon.Start();
  REQUIRE(
      Eventually([&] { return (*client)->Lookup(CustomKey("late=1")).ok(); },
                 std::chrono::milliseconds(10000)));
}

TEST_CASE(
    "the endpoint comes from options, then $GPUTUNE_ENDPOINT, then the "
    "device") {
  ClientOptions options;
  options.device = 3;
  unsetenv("GPUTUNE_ENDPOINT");
  REQUIRE(ResolveEndpoint(options) == "unix:///run/gputuned/gpu3.sock");
  setenv("GPUTUNE_ENDPOINT", "unix:///tmp/env.sock", 1);
  REQUIRE(ResolveEndpoint(options) == "unix:///tmp/env.sock");
  options.endpoint = "/tmp/direct.sock";
  REQUIRE(ResolveEndpoint(options) == "unix:///tmp/direct.sock");
  unsetenv("GPUTUNE_ENDPOINT");
  REQUIRE(DefaultEndpoint(0) == "unix:///run/gputuned/gpu0.sock");
}

TEST_CASE("bad options are refused at creation") {
  ClientOptions options;
  options.lookup_deadline = absl::ZeroDuration();
  REQUIRE(Client::Create(options).status().code() ==
          absl::StatusCode::kInvalidArgument);
  options = ClientOptions{};
  options.breaker_failures = 0;
  REQUIRE_FALSE(Client::Create(options).ok());
}

}  // namespace
}  // namespace gputune::testing
