// LeaseRenewer: keeps the leases of a client's granted claims alive. One
// background thread (started with the first claim) renews each lease every
// third of its length; a refused renewal (expired, superseded, daemon
// restarted) marks the claim lost and stops renewing it, a failed one
// (daemon unreachable) is retried soon.
//
// Thread-safe.
#ifndef GPUTUNE_CLIENT_SRC_LEASE_RENEWER_H_
#define GPUTUNE_CLIENT_SRC_LEASE_RENEWER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gputune::client_internal {

class LeaseRenewer {
 public:
  // Renews `claim_id` asking for `ttl` (zero: the daemon's default), waiting
  // at most `deadline`.
  using RenewFn = std::function<absl::Status(
      uint64_t claim_id, absl::Duration ttl, absl::Duration deadline)>;

  // `deadline`: the longest a renewal may take (also capped by a third of the
  // lease).
  LeaseRenewer(RenewFn renew, absl::Duration deadline);
  // Stops the thread (after a renewal in flight).
  ~LeaseRenewer();

  // Starts renewing a claim whose lease lasts `lease` and was asked for with
  // `ttl`. `lost` is set when a renewal is refused.
  void Add(uint64_t claim_id, absl::Duration ttl, absl::Duration lease,
           std::shared_ptr<std::atomic<bool>> lost) ABSL_LOCKS_EXCLUDED(mu_);
  // Stops renewing `claim_id`; returns after a renewal of it in flight ended,
  // so none races with what the caller does next (Record, Abandon).
  void Remove(uint64_t claim_id) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Lease {
    absl::Duration ttl;
    absl::Duration interval;  // a third of the lease
    absl::Time next;
    std::shared_ptr<std::atomic<bool>> lost;
  };
  void Loop() ABSL_LOCKS_EXCLUDED(mu_);

  // Constant after construction.
  const RenewFn renew_;
  const absl::Duration deadline_;

  absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Lease> leases_ ABSL_GUARDED_BY(mu_);
  uint64_t renewing_ ABSL_GUARDED_BY(mu_) = 0;  // claim id in flight, or 0
  bool added_ ABSL_GUARDED_BY(mu_) = false;     // wakes the loop
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // started by the first Add, under mu_
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_LEASE_RENEWER_H_
