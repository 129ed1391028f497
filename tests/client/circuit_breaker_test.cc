#include "client/src/circuit_breaker.h"

#include "tests/support/catch.h"

namespace gputune::client_internal {
namespace {

struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1000);
  std::function<absl::Time()> fn() {
    return [this] { return now; };
  }
};

const absl::Status kDown = absl::UnavailableError("cannot reach gputuned");

TEST_CASE("a closed breaker admits every call") {
  FakeClock clock;
  CircuitBreaker b({2, absl::Milliseconds(250), absl::Seconds(5)}, "d",
                   clock.fn());
  for (int i = 0; i < 10; ++i) {
    REQUIRE(b.Admit().ok());
    b.ReportSuccess();
  }
  REQUIRE_FALSE(b.open());
}

TEST_CASE("the breaker opens after consecutive failures and refuses fast") {
  FakeClock clock;
  CircuitBreaker b({2, absl::Milliseconds(250), absl::Seconds(5)}, "d",
                   clock.fn());
  REQUIRE(b.Admit().ok());
  b.ReportFailure(kDown);
  REQUIRE(b.Admit().ok());  // one failure is not enough
  b.ReportFailure(kDown);
  REQUIRE(b.open());
  const absl::Status refused = b.Admit();
  REQUIRE(refused.code() == absl::StatusCode::kUnavailable);
  // The refusal repeats what was wrong and when the next try is.
  REQUIRE(std::string(refused.message()).find("cannot reach gputuned") !=
          std::string::npos);
  REQUIRE(std::string(refused.message()).find("next try in 250ms") !=
          std::string::npos);
}

TEST_CASE("a success in between resets the failure count") {
  FakeClock clock;
  CircuitBreaker b({2, absl::Milliseconds(250), absl::Seconds(5)}, "d",
                   clock.fn());
  b.ReportFailure(kDown);
  b.ReportSuccess();
  b.ReportFailure(kDown);
  REQUIRE_FALSE(b.open());
}

TEST_CASE("a probe given up frees the slot and leaves the breaker open") {
  FakeClock clock;
  CircuitBreaker b({1, absl::Milliseconds(250), absl::Seconds(5)}, "d",
                   clock.fn());
  b.ReportFailure(kDown);
  clock.now += absl::Milliseconds(300);
  bool probe = false;
  REQUIRE(b.Admit(true, &probe).ok());
  REQUIRE(probe);
  REQUIRE_FALSE(b.Admit().ok());  // one probe at a time
  b.GiveUp(/*probe=*/true);       // cancelled before it learned anything
  REQUIRE(b.open());
  REQUIRE(b.Admit(true, &probe).ok());  // the next call probes
  REQUIRE(probe);
  b.GiveUp(/*probe=*/false);  // a call that was not the probe frees nothing
  REQUIRE_FALSE(b.Admit().ok());
}

TEST_CASE("after the open time one probe goes through, success closes") {
  FakeClock clock;
  CircuitBreaker b({1, absl::Milliseconds(250), absl::Seconds(5)}, "d",
                   clock.fn());
  b.ReportFailure(kDown);
  REQUIRE_FALSE(b.Admit().ok());
  clock.now += absl::Milliseconds(250);
  REQUIRE(b.Admit().ok());        // the probe
  REQUIRE_FALSE(b.Admit().ok());  // others wait for it
  b.ReportSuccess();
  REQUIRE(b.Admit().ok());
  REQUIRE(b.Admit().ok());
}

TEST_CASE("a failed probe doubles the open time up to the maximum") {
  FakeClock clock;
  CircuitBreaker b({1, absl::Milliseconds(250), absl::Seconds(1)}, "d",
                   clock.fn());
  b.ReportFailure(kDown);
  absl::Duration expected = absl::Milliseconds(250);
  for (int i = 0; i < 4; ++i) {
    clock.now += expected - absl::Milliseconds(1);
    REQUIRE_FALSE(b.Admit().ok());
    clock.now += absl::Milliseconds(1);
    REQUIRE(b.Admit().ok());
    b.ReportFailure(kDown);
    expected = std::min(expected * 2, absl::Seconds(1));
  }
}

TEST_CASE("a long call that may not probe is refused while open") {
  FakeClock clock;
  CircuitBreaker b({1, absl::Milliseconds(250), absl::Seconds(5)}, "d",
                   clock.fn());
  b.ReportFailure(kDown);
  clock.now += absl::Seconds(1);
  REQUIRE_FALSE(b.Admit(/*may_probe=*/false).ok());
  REQUIRE(b.Admit().ok());
}

}  // namespace
}  // namespace gputune::client_internal
