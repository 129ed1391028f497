// ClaimGuard: the RAII handle of a claim on a key (Client::Claim).
//
//   absl::StatusOr<gputune::ClaimGuard> claim = client->Claim(key);
//   if (claim.ok() && claim->granted()) {
//     v1::RecordRequest result = TuneLocally(key);   // lease renewed meanwhile
//     absl::StatusOr<v1::Entry> entry = claim->Record(std::move(result));
//   }  // not recorded (error, exception, early return): abandoned here
//
// While a guard holds a granted claim, the client renews its lease in the
// background every lease_ttl / 3, so a slow tuning run keeps the key. If a
// renewal is refused (the lease expired or the daemon restarted) the guard
// is lost(): Record will be refused too and the caller should stop.
//
// A guard is movable, not copyable. Its methods are not meant to be called
// concurrently on one guard; different guards are independent.
#ifndef GPUTUNE_CLAIM_GUARD_H_
#define GPUTUNE_CLAIM_GUARD_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {

class ClaimGuard {
 public:
  // An empty guard: holds nothing, outcome UNSPECIFIED.
  ClaimGuard() = default;
  ClaimGuard(ClaimGuard&& other) noexcept = default;
  // Abandons what this guard held (as the destructor does) first.
  ClaimGuard& operator=(ClaimGuard&& other) noexcept;
  ClaimGuard(const ClaimGuard&) = delete;
  ClaimGuard& operator=(const ClaimGuard&) = delete;

  // Still holding a claim that was neither recorded nor released: abandons it
  // (reason "released without record"), waiting at most the client's
  // deadline. Errors are logged nowhere and ignored: an unreachable daemon
  // lets the lease expire instead.
  ~ClaimGuard();

  // What Claim decided: GRANTED, PENDING, HIT or BACKOFF.
  v1::ClaimOutcome outcome() const { return response_.outcome(); }
  // The daemon's answer: the claim for GRANTED (ours) or PENDING (the other
  // holder's), the entry for HIT, retry_after for BACKOFF.
  const v1::ClaimResponse& response() const { return response_; }
  // The claim was GRANTED and is still held by this guard.
  bool granted() const;
  // Our claim id (the fencing token); 0 unless GRANTED.
  uint64_t claim_id() const;
  // A background renewal was refused: the lease is gone.
  bool lost() const;

  // Persists the tuning result (claim_id is filled in) and releases the
  // claim; the key turns HIT and is memoised. FAILED_PRECONDITION when the
  // claim is no longer live (lease expired, superseded, already recorded or
  // abandoned, or fenced because the daemon lost the fleet claim behind it):
  // the guard then holds nothing and is lost(); Claim the key again (another
  // daemon may hold it now). INVALID_ARGUMENT names a bad field. On an error
  // other than FAILED_PRECONDITION the guard still holds the claim (retry or
  // abandon).
  absl::StatusOr<v1::Entry> Record(v1::RecordRequest request);

  // Gives the claim up: the key turns MISS (or BACKOFF after repeated
  // abandons). The guard holds nothing afterwards, whatever the result.
  absl::Status Abandon(absl::string_view reason);

  // Stops renewing and forgets the claim without abandoning it: the lease
  // runs out on its own unless someone abandons it by id (gputunectl claim).
  // Returns the claim id (0 when nothing was held).
  uint64_t Release();

  class State;

 private:
  friend class Client;
  ClaimGuard(v1::ClaimResponse response, std::shared_ptr<State> state)
      : response_(std::move(response)), state_(std::move(state)) {}

  v1::ClaimResponse response_;
  std::shared_ptr<State> state_;  // null unless GRANTED
};

}  // namespace gputune

#endif  // GPUTUNE_CLAIM_GUARD_H_
