// CircuitBreaker: stops a client from paying an RPC deadline again and again
// while its daemon is down or hung.
//
// Closed (normal): every call goes ahead. After `failures` consecutive
// transport failures it opens: calls are refused at once (UNAVAILABLE with the
// last failure) for `open_time`. Then one call at a time is let through as a
// probe; its success closes the breaker, its failure reopens it for twice as
// long (at most `max_open_time`).
//
//   if (absl::Status s = breaker.Admit(); !s.ok()) return s;
//   grpc::Status r = stub->Call(...);
//   breaker.Report(IsTransportFailure(r));
//
// Thread-safe.
#ifndef GPUTUNE_CLIENT_SRC_CIRCUIT_BREAKER_H_
#define GPUTUNE_CLIENT_SRC_CIRCUIT_BREAKER_H_

#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gputune::client_internal {

struct BreakerOptions {
  int failures = 2;
  absl::Duration open_time = absl::Milliseconds(250);
  absl::Duration max_open_time = absl::Seconds(2);
};

class CircuitBreaker {
 public:
  // `what` names the daemon in refusals ("gputuned at unix:///..."). `now`
  // is the clock (tests pass a fake one).
  CircuitBreaker(const BreakerOptions& options, std::string what,
                 std::function<absl::Time()> now = absl::Now);

  // OK: make the call, then Report its outcome. UNAVAILABLE: the breaker is
  // open (or another call is probing); do not call. A call that may last long
  // (a watch stream) passes may_probe=false: it only goes ahead while the
  // breaker is closed, so it never holds the probe slot.
  // *probe (if given) is set when this call is the probe.
  absl::Status Admit(bool may_probe = true, bool* probe = nullptr)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The outcome of an admitted call. `failure` (the daemon could not be
  // reached or did not answer in time) carries its message.
  void ReportSuccess() ABSL_LOCKS_EXCLUDED(mu_);
  void ReportFailure(const absl::Status& failure) ABSL_LOCKS_EXCLUDED(mu_);
  // An admitted call given up before it learned anything of the daemon: no
  // verdict. `probe`: it was the probe (see Admit), whose slot is free again.
  void GiveUp(bool probe) ABSL_LOCKS_EXCLUDED(mu_);

  bool open() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Constant after construction.
  const BreakerOptions options_;
  const std::string what_;
  const std::function<absl::Time()> now_;

  mutable absl::Mutex mu_;
  int consecutive_failures_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time open_until_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::Duration open_time_ ABSL_GUARDED_BY(mu_);
  bool probing_ ABSL_GUARDED_BY(mu_) = false;
  std::string last_failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_CIRCUIT_BREAKER_H_
