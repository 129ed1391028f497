#include "client/src/lease_renewer.h"

#include <algorithm>

namespace gputune::client_internal {

LeaseRenewer::LeaseRenewer(RenewFn renew, absl::Duration deadline)
    : renew_(std::move(renew)), deadline_(deadline) {}

LeaseRenewer::~LeaseRenewer() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

void LeaseRenewer::Add(uint64_t claim_id, absl::Duration ttl,
                       absl::Duration lease,
                       std::shared_ptr<std::atomic<bool>> lost) {
  absl::MutexLock lock(&mu_);
  const absl::Duration interval = std::max(lease / 3, absl::Milliseconds(10));
  leases_[claim_id] =
      Lease{ttl, interval, absl::Now() + interval, std::move(lost)};
  added_ = true;
  if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
}

void LeaseRenewer::Remove(uint64_t claim_id) {
  absl::MutexLock lock(&mu_);
  leases_.erase(claim_id);
  auto done = [this, claim_id]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return renewing_ != claim_id;
  };
  mu_.Await(absl::Condition(&done));
}

void LeaseRenewer::Loop() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    absl::Time next = absl::InfiniteFuture();
    uint64_t due = 0;
    for (const auto& [id, lease] : leases_) {
      if (lease.next < next) {
        next = lease.next;
        due = id;
      }
    }
    const absl::Time now = absl::Now();
    if (due == 0 || next > now) {
      auto woken = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || added_;
      };
      mu_.AwaitWithDeadline(absl::Condition(&woken), next);
      added_ = false;
      continue;
    }
    Lease& lease = leases_[due];
    const absl::Duration ttl = lease.ttl;
    const absl::Duration deadline = std::min(deadline_, lease.interval);
    renewing_ = due;
    mu_.Unlock();
    const absl::Status s = renew_(due, ttl, deadline);
    mu_.Lock();
    renewing_ = 0;
    auto it = leases_.find(due);
    if (it == leases_.end()) continue;  // removed meanwhile
    if (s.ok()) {
      it->second.next = absl::Now() + it->second.interval;
    } else if (s.code() == absl::StatusCode::kFailedPrecondition ||
               s.code() == absl::StatusCode::kInvalidArgument) {
      it->second.lost->store(true);
      leases_.erase(it);
    } else {
      // Unreachable or slow: try again soon, while the lease may still hold.
      it->second.next = absl::Now() + it->second.interval / 3;
    }
  }
}

}  // namespace gputune::client_internal
