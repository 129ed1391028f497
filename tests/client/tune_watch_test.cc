// TuneDense and Watch through the client.
#include <atomic>
#include <mutex>
#include <vector>

#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

const std::vector<std::string> kQuickHost = {"--backend=host",
                                             "--tune_budget=100ms"};

TEST_CASE("TuneDense with wait returns the daemon's HIT and memoises it") {
  DaemonProcess daemon(kQuickHost);
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  const v1::Key key = DenseKey(1, 64, 64);
  absl::StatusOr<v1::KeyStatus> tuned = client->TuneDense(key, /*wait=*/true);
  REQUIRE(tuned.ok());
  REQUIRE(tuned->state() == v1::KEY_STATE_HIT);
  REQUIRE(tuned->entry().source() == v1::SOURCE_DAEMON_MEASURED);
  REQUIRE(client->Lookup(key)->from_memo());
  REQUIRE(counter.of("Lookup") == 0);
}

TEST_CASE("TuneDense without wait answers PENDING at once") {
  DaemonProcess daemon(kQuickHost);
  auto client = ClientOf(daemon);
  const v1::Key key = DenseKey(2, 128, 128);
  absl::StatusOr<v1::KeyStatus> started = client->TuneDense(key, false);
  REQUIRE(started.ok());
  REQUIRE((started->state() == v1::KEY_STATE_PENDING ||
           started->state() == v1::KEY_STATE_HIT));
  REQUIRE(Eventually([&] { return client->Lookup(key)->hit(); },
                     std::chrono::milliseconds(20000)));
}

TEST_CASE("TuneDense on a daemon without a backend says what to do") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  absl::StatusOr<v1::KeyStatus> r = client->TuneDense(DenseKey(1), true);
  REQUIRE(r.status().code() == absl::StatusCode::kFailedPrecondition);
  INFO(r.status().message());
  REQUIRE(std::string(r.status().message()).find("backend") !=
          std::string::npos);
  REQUIRE(std::string(r.status().message()).find("claim the key") !=
          std::string::npos);
}

TEST_CASE("TuneDense refuses custom keys without I/O") {
  DaemonProcess daemon({"--backend=none"});
  RpcCounter counter;
  auto client = ClientOf(daemon, {}, &counter);
  REQUIRE(client->TuneDense(CustomKey("x=1"), true).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(counter.total() == 0);
}

TEST_CASE("a failing benchmark job maps to ABORTED with the reason") {
  // Every candidate of the fault backend fails validation.
  DaemonProcess daemon(
      {"--backend=fault", "--fault_candidates=fault.wrong;fault.throws"});
  auto client = ClientOf(daemon);
  absl::StatusOr<v1::KeyStatus> r =
      client->TuneDense(DenseKey(1, 64, 64), true);
  INFO(r.status().ToString());
  REQUIRE_FALSE(r.ok());
  REQUIRE(r.status().code() == absl::StatusCode::kAborted);
}

TEST_CASE("Watch delivers the current state, then each change until HIT") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  const v1::Key key = CustomKey("watch=1");
  std::mutex mu;
  std::vector<v1::KeyState> seen;
  absl::StatusOr<std::unique_ptr<WatchStream>> watch =
      client->Watch(key, [&](const v1::KeyStatus& s) {
        std::lock_guard<std::mutex> lock(mu);
        seen.push_back(s.state());
      });
  REQUIRE(watch.ok());
  REQUIRE(Eventually([&] {
    std::lock_guard<std::mutex> lock(mu);
    return !seen.empty();
  }));
  auto tuner = ClientOf(daemon);
  {
    absl::StatusOr<ClaimGuard> guard = tuner->Claim(key);
    REQUIRE(guard->granted());
    REQUIRE(Eventually([&] {
      std::lock_guard<std::mutex> lock(mu);
      return seen.back() == v1::KEY_STATE_PENDING;
    }));
    v1::RecordRequest result;
    result.mutable_execution()->set_kernel("k.watched");
    REQUIRE(guard->Record(result).ok());
  }
  REQUIRE((*watch)->Wait(absl::Seconds(5)).ok());
  std::lock_guard<std::mutex> lock(mu);
  REQUIRE(seen.front() == v1::KEY_STATE_MISS);
  REQUIRE(seen.back() == v1::KEY_STATE_HIT);
  REQUIRE((*watch)->last().entry().execution().kernel() == "k.watched");
  // The HIT seen on the stream is memoised.
  REQUIRE(client->Lookup(key)->from_memo());
}

TEST_CASE("a watch ends at its timeout, or when cancelled") {
  DaemonProcess daemon({"--backend=none"});
  auto client = ClientOf(daemon);
  auto timed =
      client->Watch(CustomKey("watch=2"), nullptr, absl::Milliseconds(200));
  REQUIRE((*timed)->Wait(absl::Seconds(5)).code() ==
          absl::StatusCode::kDeadlineExceeded);
  auto cancelled = client->Watch(CustomKey("watch=3"), nullptr);
  REQUIRE((*cancelled)->Wait(absl::Milliseconds(50)).code() ==
          absl::StatusCode::kDeadlineExceeded);  // still running
  (*cancelled)->Cancel();
  REQUIRE((*cancelled)->Wait(absl::Seconds(5)).code() ==
          absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace gputune::testing
