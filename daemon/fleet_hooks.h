// FleetHooks: the only things the arbiter's callers (JobQueue and
// TuneServiceImpl) ask of the fleet tier. A null FleetHooks* means no fleet
// (gputuned without --fleet): the callers then use Arbiter::Claim and
// TuneStore::Put directly, exactly as before.
//
// The fleet tier itself (daemon/fleet/fleet_link.h) implements this; the
// arbiter, the job queue and the service know nothing else of it.
#ifndef GPUTUNE_DAEMON_FLEET_HOOKS_H_
#define GPUTUNE_DAEMON_FLEET_HOOKS_H_

#include <functional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {

class FleetHooks {
 public:
  virtual ~FleetHooks() = default;

  // What Claim answers, called once.
  using ClaimDone = std::function<void(absl::StatusOr<v1::ClaimResponse>)>;

  // Arbiter::Claim(key, holder, ttl, kind), with the key's fleet claim taken
  // first when a local grant is possible. Answers as Arbiter::Claim does:
  // GRANTED (a local claim, backed by the fleet claim, or local-only while
  // the fleet is unreachable), HIT (also when the fleet already had the
  // canonical entry, which is then adopted), PENDING (a local holder, or
  // another daemon of the fleet: then ClaimInfo.holder starts with "fleet:"
  // and names its host, GPU and fleet claim; the local claim lapses with
  // that fleet lease) or BACKOFF. Never blocks on the network: a claim that
  // needs PostgreSQL (one round trip, bounded by the statement timeout) runs
  // on the fleet tier's own claim thread, which calls `done` (while the
  // fleet is reachable, every Claim of a key that is not a HIT goes there,
  // in order); a HIT, or any Claim while the fleet is unreachable, calls
  // `done` before Claim returns. `done` must not block.
  //
  // `deadline` is the caller's (the gRPC deadline of a Claim): a claim that
  // is decided after it is never granted (DEADLINE_EXCEEDED, and a fleet
  // claim taken for it is released), so no lease is held for a client that
  // gave up. A fleet claim round trip is bounded well below a client's
  // default deadline (FleetOptions::claim_timeout); one that fails drops the
  // claim connection, and Claims are decided locally for a backoff.
  virtual void Claim(const v1::Key& key, absl::string_view holder,
                     absl::Duration ttl, ClaimKind kind, absl::Time deadline,
                     ClaimDone done) = 0;

  // TuneStore::Put(entry) for a Record (daemon- or client-measured), with
  // the entry's row in the fleet outbox written in the same SQLite
  // transaction: the entry is never durable without being queued for the
  // fleet. Call between Arbiter::BeginRecord and CommitRecord, where Put was
  // called; blocks on SQLite.
  virtual absl::Status PersistRecord(const v1::Entry& entry) = 0;

  // After Arbiter::CommitRecord of a PersistRecord'ed entry: its outbox row
  // may be published now (not before: an answer from the fleet must not
  // reach the index ahead of the entry's own commit).
  virtual void RecordCommitted(const v1::Key& key) = 0;

  // ImportEntries' TuneStore::PutAll(entries) and Arbiter::Install(entries),
  // with the outbox rows of the entries of this daemon's fingerprint
  // (unfenced: an import holds no fleet claim) written in the same SQLite
  // transaction: an operator's import is shared like a Record, and the
  // fleet's rules decide (the first valid publish per key and candidate set
  // is canonical, so an import cannot replace a fleet entry; it is itself
  // replaced here by the fleet's). Entries of other fingerprints stay local.
  // Blocks on SQLite; call on the store executor.
  virtual absl::Status Import(const std::vector<v1::Entry>& entries) = 0;

  // The link's state, for GetStatus.
  virtual void FillStatus(v1::FleetStatus* status) const = 0;
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_FLEET_HOOKS_H_
