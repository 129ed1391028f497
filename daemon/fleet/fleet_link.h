// FleetLink: one daemon's link to its fleet tier (gputuned --fleet=CONNINFO):
// the outbox and its publisher, the change-feed follower, and fleet claims.
// It implements FleetHooks, through which the job queue and the service
// reach it; see docs/design.md and docs/architecture.md ("The fleet tier")
// for the states and the fencing argument.
//
//   absl::StatusOr<std::unique_ptr<FleetLink>> link = FleetLink::Create(
//       options, identity, digest, store, arbiter, clock);
//   (*link)->Start();   // connects in the background; serving goes on
//   ...
//   (*link)->Stop();    // before the store and the arbiter go
//
// Local stays authoritative for serving: nothing here is on the lookup
// path, and no caller's thread waits for PostgreSQL: fleet claims run on
// the link's claim thread and answer through a callback.
//
// Threads (all its own, ended by Stop):
//  - follower: the feed connection. Connects, checks and migrates the
//    schema, LISTENs, then adopts every feed row after the last adopted
//    position (kept in the local database, so a restart or reconnect
//    catches up), woken by NOTIFY or every poll_interval. Its position is
//    the last row it read (never a value a row carries); rows it cannot use
//    (oversized, unparseable, columns that disagree with their entry) are
//    skipped and counted. Its state is the link's state in GetStatus.
//  - publisher: drains the outbox with retry and backoff, a page of rows at
//    a time, oldest first, moving on past rows that wait; each row is
//    removed once the fleet answered it (accepted, or refused and the
//    fleet's canonical entry adopted instead), or once PostgreSQL refused
//    its data kMaxRefusals times (a constraint, an invalid value: logged
//    and counted, the entry kept locally).
//  - claims: runs FleetHooks::Claim calls that need the fleet, one at a
//    time (they share the claim connection), and answers them.
//  - keeper: (re)connects the claim connection, renews the fleet claims of
//    keys this daemon is tuning and releases those it no longer holds
//    locally (abandoned, expired).
//
// Local tables (in the daemon's SQLite file, created if missing):
//   fleet_outbox(id, key_id UNIQUE, candidate_set, fence, entry, queued_at)
//   fleet_state(name PRIMARY KEY, value)  -- fleet_id, feed_seq
//
// Thread-safe.
#ifndef GPUTUNE_DAEMON_FLEET_FLEET_LINK_H_
#define GPUTUNE_DAEMON_FLEET_FLEET_LINK_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/arbiter.h"
#include "daemon/clock.h"
#include "daemon/fleet/fleet_store.h"
#include "daemon/fleet_hooks.h"
#include "daemon/serial_executor.h"
#include "storage/tune_store.h"

namespace gputune::fleet {

struct FleetOptions {
  std::string conninfo;
  // Lease of a fleet claim; renewed every third of it while tuning.
  absl::Duration lease_ttl = absl::Seconds(30);
  // How often the feed is read without a NOTIFY.
  absl::Duration poll_interval = absl::Seconds(1);
  // Bound on every PostgreSQL statement.
  absl::Duration statement_timeout = absl::Seconds(5);
  // Bound on a fleet claim's round trip (the claim connection's statement
  // timeout, and how long its answer is waited for): under the client
  // library's default deadline (2 s), so that a slow or stopped PostgreSQL
  // turns into local claims before clients give up (--fleet_claim_timeout).
  absl::Duration claim_timeout = absl::Seconds(1);
  // Records the outbox holds at most (one per key); beyond, a Record is
  // kept locally only (counted in FleetStatus.outbox_overflow).
  uint64_t outbox_limit = 100000;
  // Reconnect and republish backoff.
  absl::Duration retry_min = absl::Milliseconds(100);
  absl::Duration retry_max = absl::Seconds(5);
};

// This daemon as the fleet names it: the host name, the device (name, UUID
// or ordinal) and a fresh instance id.
FleetIdentity MakeIdentity(const v1::Fingerprint& fingerprint,
                           const std::string& device);

class FleetLink final : public FleetHooks {
 public:
  // Creates the local tables if needed and reads the outbox depth. Does not
  // connect. `fingerprint_digest` is the daemon's (entries of others are
  // neither published nor adopted). Pointers must outlive the link.
  static absl::StatusOr<std::unique_ptr<FleetLink>> Create(
      const FleetOptions& options, FleetIdentity me,
      std::string fingerprint_digest, storage::TuneStore* store,
      Arbiter* arbiter, const Clock* clock);
  ~FleetLink() override;

  void Start();
  // Ends the threads (a call in flight finishes within the statement
  // timeout). Idempotent.
  void Stop();

  // FleetHooks.
  void Claim(const v1::Key& key, absl::string_view holder, absl::Duration ttl,
             ClaimKind kind, absl::Time deadline, ClaimDone done) override;
  absl::Status PersistRecord(const v1::Entry& entry) override;
  void RecordCommitted(const v1::Key& key) override;
  absl::Status Import(const std::vector<v1::Entry>& entries) override;
  void FillStatus(v1::FleetStatus* status) const override;

 private:
  FleetLink(const FleetOptions& options, FleetIdentity me,
            std::string fingerprint_digest, storage::TuneStore* store,
            Arbiter* arbiter, const Clock* clock);

  struct Held {
    v1::Key key;
    uint64_t fence = 0;
    uint64_t local_claim_id = 0;
    absl::Time renewed_at;
    // Another daemon took the claim over (our lease lapsed): our result is
    // still published under this fence, to be refused.
    bool lost = false;
  };
  struct OutboxRow {
    int64_t id = 0;
    std::string key_id;
    std::string candidate_set;
    uint64_t fence = 0;
    std::string entry;
  };

  // Claim's answer: with `ask_fleet`, after one round trip on the claim
  // connection (on the claim thread: one fleet claim at a time, so two
  // callers that both found a key free locally never both go to the fleet,
  // where the second would take the claim over from the first); without,
  // from the arbiter alone.
  // No grant once `deadline` (the caller's) has passed: DEADLINE_EXCEEDED.
  absl::StatusOr<v1::ClaimResponse> ClaimOnce(
      const v1::Key& key, absl::string_view holder, absl::Duration ttl,
      ClaimKind kind, absl::Time deadline, bool ask_fleet);
  void FollowerLoop();
  void PublisherLoop();
  void KeeperLoop();
  // Sleeps up to `d`, or until Stop. False when stopping.
  bool Nap(absl::Duration d);
  // Records the link's state; logs when it changes.
  void SetConnected(bool connected, const std::string& error)
      ABSL_LOCKS_EXCLUDED(mu_);
  // A new connection whose statements are bounded by `statement_timeout`.
  absl::StatusOr<std::unique_ptr<FleetConnection>> Connect(
      absl::Duration statement_timeout);
  // One pass over the feed from the last adopted position: true when rows
  // were adopted and more may follow.
  absl::StatusOr<bool> FollowOnce(FleetConnection& conn);
  // Adopts entries the fleet holds (serialized v1::Entry each, with where
  // they came from) into the store and the index; with `feed_seq`, the new
  // feed position is written in the same transaction. Feed rows published
  // by this daemon only move the position; rows that cannot be used
  // (oversized, unparseable, columns that disagree with the entry) are
  // skipped and counted. The position is the caller's: the last row it
  // read from the feed.
  absl::Status Adopt(const std::vector<FleetConnection::FeedRow>& rows,
                     uint64_t feed_seq);
  // Writes `entries` to the store and, for each of this fleet's
  // fingerprint, its outbox row under `fence`, in one transaction (beyond
  // outbox_limit an entry is stored but not queued, and counted).
  absl::Status PutAndQueue(const std::vector<v1::Entry>& entries,
                           uint64_t fence) ABSL_LOCKS_EXCLUDED(mu_);
  // The outbox rows of these keys wait until as many LetGo calls (the
  // entries reached the index); LetGo wakes the publisher.
  void HoldBack(const std::vector<std::string>& key_ids)
      ABSL_LOCKS_EXCLUDED(mu_);
  void LetGo(const std::vector<std::string>& key_ids) ABSL_LOCKS_EXCLUDED(mu_);
  // Up to `limit` outbox rows with id > after_id, oldest first.
  absl::StatusOr<std::vector<OutboxRow>> ReadOutbox(int64_t after_id,
                                                    int limit);
  absl::Status RemoveFromOutbox(const std::vector<int64_t>& ids);
  // Acts on the fleet's answer to one outbox row (counts, logs, adopts the
  // canonical entry); true when the row is done with.
  bool Answered(const OutboxRow& row, const FleetConnection::PublishResult& r);
  // PostgreSQL refused the data of `row`, published alone (`error` is
  // INVALID_ARGUMENT): the row waits, backing off, while the rows behind it
  // go on; true when this was its kMaxRefusals-th refusal and it leaves the
  // outbox (logged, counted in FleetStatus.outbox_dropped).
  bool Failed(const OutboxRow& row, const absl::Status& error);

  // Constant after construction.
  const FleetOptions options_;
  const FleetIdentity me_;
  const std::string fingerprint_;
  const std::string target_;  // conninfo without the password
  storage::TuneStore* const store_;
  Arbiter* const arbiter_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool schema_ok_ ABSL_GUARDED_BY(mu_) = false;
  std::string error_ ABSL_GUARDED_BY(mu_) = "connecting";
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool outbox_ready_ ABSL_GUARDED_BY(mu_) = false;  // wakes the publisher
  // Fleet claims this daemon holds, by key id.
  absl::flat_hash_map<std::string, Held> held_ ABSL_GUARDED_BY(mu_);
  // Keys waited on another daemon for, until that lease's end.
  absl::flat_hash_map<std::string, absl::Time> waited_ ABSL_GUARDED_BY(mu_);
  // The claim thread: runs the Claims that ask the fleet, in order. Made by
  // Start; Stop drains it (what is queued then is answered locally).
  std::unique_ptr<SerialExecutor> claims_ ABSL_GUARDED_BY(mu_);
  // Keys between HoldBack and LetGo (a Record or an import on its way to
  // the index), with how many: their outbox rows are not published yet.
  absl::flat_hash_map<std::string, int> in_flight_ ABSL_GUARDED_BY(mu_);
  // Refusals of outbox rows by key id, since their row was queued.
  absl::flat_hash_map<std::string, int> attempts_ ABSL_GUARDED_BY(mu_);
  // Outbox keys not to publish before this time: another daemon holds
  // them, or PostgreSQL refused their row (backing off).
  absl::flat_hash_map<std::string, absl::Time> retry_at_ ABSL_GUARDED_BY(mu_);
  uint64_t outbox_depth_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t feed_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t fleet_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Duration feed_lag_ ABSL_GUARDED_BY(mu_);

  // The connection Claim and the keeper share; null while unreachable.
  absl::Mutex claim_mu_ ABSL_ACQUIRED_AFTER(mu_);
  std::unique_ptr<FleetConnection> claim_conn_ ABSL_GUARDED_BY(claim_mu_);
  // After a fleet claim failed: Claims are decided locally until then; the
  // pause doubles (retry_min..retry_max) while fleet claims keep failing.
  absl::Time claims_local_until_ ABSL_GUARDED_BY(claim_mu_) =
      absl::InfinitePast();
  absl::Duration claims_backoff_ ABSL_GUARDED_BY(claim_mu_);

  std::atomic<uint64_t> outbox_overflow_{0};
  std::atomic<uint64_t> published_{0};
  std::atomic<uint64_t> adopted_{0};
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> local_only_claims_{0};
  std::atomic<uint64_t> outbox_dropped_{0};
  std::atomic<uint64_t> publish_errors_{0};
  // Feed rows skipped, by why (FleetStatus.feed_unparseable, ...).
  std::atomic<uint64_t> feed_unparseable_{0};
  std::atomic<uint64_t> feed_mismatched_{0};
  std::atomic<uint64_t> feed_oversized_{0};
  int wake_fds_[2] = {-1, -1};  // a pipe: Stop wakes the follower's poll
  std::thread follower_;
  std::thread publisher_;
  std::thread keeper_;
  bool started_ = false;
};

}  // namespace gputune::fleet

#endif  // GPUTUNE_DAEMON_FLEET_FLEET_LINK_H_
