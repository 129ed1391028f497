#include "client/src/circuit_breaker.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gputune::client_internal {

CircuitBreaker::CircuitBreaker(const BreakerOptions& options, std::string what,
                               std::function<absl::Time()> now)
    : options_(options),
      what_(std::move(what)),
      now_(std::move(now)),
      open_time_(options.open_time) {}

absl::Status CircuitBreaker::Admit(bool may_probe, bool* probe) {
  if (probe != nullptr) *probe = false;
  absl::MutexLock lock(&mu_);
  if (consecutive_failures_ < options_.failures) return absl::OkStatus();
  const absl::Time now = now_();
  if (may_probe && now >= open_until_ && !probing_) {
    probing_ = true;  // this call finds out whether the daemon is back
    if (probe != nullptr) *probe = true;
    return absl::OkStatus();
  }
  const absl::Duration wait = std::max(open_until_ - now, absl::ZeroDuration());
  // The last failure already says what to check.
  return absl::UnavailableError(absl::StrCat(
      last_failure_.empty() ? what_ + " is not answering" : last_failure_,
      probing_
          ? "; checking again now"
          : absl::StrCat("; next try in ", absl::FormatDuration(absl::Ceil(
                                               wait, absl::Milliseconds(1))))));
}

void CircuitBreaker::ReportSuccess() {
  absl::MutexLock lock(&mu_);
  consecutive_failures_ = 0;
  probing_ = false;
  open_time_ = options_.open_time;
}

void CircuitBreaker::ReportFailure(const absl::Status& failure) {
  absl::MutexLock lock(&mu_);
  last_failure_ = std::string(failure.message());
  ++consecutive_failures_;
  if (probing_) {
    probing_ = false;
    open_time_ = std::min(open_time_ * 2, options_.max_open_time);
  }
  if (consecutive_failures_ >= options_.failures) {
    open_until_ = now_() + open_time_;
  }
}

void CircuitBreaker::GiveUp(bool probe) {
  if (!probe) return;
  absl::MutexLock lock(&mu_);
  probing_ = false;
}

bool CircuitBreaker::open() const {
  absl::MutexLock lock(&mu_);
  return consecutive_failures_ >= options_.failures;
}

}  // namespace gputune::client_internal
