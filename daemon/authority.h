// Authority: who may do what on gputuned's shared socket.
//
// Every process that can open the socket may look up, claim, record, watch,
// subscribe to changes and ask for benchmarks (what inference processes
// need). The operator calls
// - DeleteEntries, ImportEntries, Backup, SetLogLevel - change or expose the
// whole cache or the daemon, so they need an operator peer: one whose
// SO_PEERCRED says root, the daemon's own user, or a member (primary or
// supplementary group) of --admin_group. A peer without credentials (TCP)
// is never an operator. See docs/operations.md ("Who may do what").
//
// A claim is bound to the peer that took it: its uid for a unix peer, its
// connection otherwise. Renew, Record and Abandon by anyone else are
// PERMISSION_DENIED (operators excepted), so a claim id read from GetStatus
// is of no use to another user. Claims no client took (the daemon's own
// TuneDense claims, fleet stand-ins) are bound to nobody here: the arbiter
// refuses every client's Renew, Record and Abandon of them (ClaimKind,
// daemon/arbiter.h), operators' too.
//
// Thread-safe.
#ifndef GPUTUNE_DAEMON_AUTHORITY_H_
#define GPUTUNE_DAEMON_AUTHORITY_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/listener.h"

namespace gputune {

class Authority {
 public:
  // `peers` (may be null: no peer is then known) must outlive this.
  Authority(const PeerTable* peers, uid_t daemon_uid,
            std::optional<gid_t> admin_group);

  // OK for an operator peer, else PERMISSION_DENIED naming the method and
  // who may call it. `grpc_peer` is ServerContextBase::peer().
  absl::Status RequireOperator(absl::string_view grpc_peer,
                               absl::string_view method) const;

  // Whether `peer` is an operator (the rule above), for listeners that know
  // their peer directly (the Redis front door).
  bool IsOperator(const Peer& peer) const;

  // The identity a claim taken by this peer is bound to.
  std::string Owner(absl::string_view grpc_peer) const;

  // Binds claim_id to owner (after a GRANTED Claim).
  void Bind(uint64_t claim_id, std::string owner) ABSL_LOCKS_EXCLUDED(mu_);
  // OK when claim_id is bound to this peer's identity or to nobody (unknown
  // ids are for the arbiter to answer), or the peer is an operator (who may
  // abandon a stuck claim); else PERMISSION_DENIED.
  absl::Status CheckClaim(uint64_t claim_id, absl::string_view grpc_peer) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets a claim that ended (recorded, abandoned).
  void Release(uint64_t claim_id) ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets every claim for which live(id) is false (expired leases), when
  // more than `threshold` are bound. Call after Bind.
  void Prune(size_t threshold, const std::function<bool(uint64_t)>& live)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const PeerTable* const peers_;
  const uid_t daemon_uid_;
  const std::optional<gid_t> admin_group_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::string> owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_AUTHORITY_H_
