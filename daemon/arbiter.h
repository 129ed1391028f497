// Arbiter: decides, for every key, who tunes it. It holds the in-memory index
// of entries (the hot path: Lookup never touches SQLite) and the live claims.
//
// Per key the state is one of (docs/design.md, "Key states and arbitration"):
//   HIT      an entry tuned for the asker's candidate set on this device
//   PENDING  a live claim (lease not expired, or a Record being persisted)
//   BACKOFF  abandoned backoff_abandons times within backoff_window: no claims
//            until the cool-down ends
//   STALE    an entry for another candidate set or fingerprint: re-tunable.
//            Stale-but-usable (Found::stale_usable) when only the software
//            changed: the asker's candidate set, the same device model
//            (proto/fingerprint.h DeviceModel) and stale_while_revalidate on
//   MISS     none of the above
//
// Claim ids are fencing tokens: strictly increasing and never reused, also
// across restarts (blocks are reserved durably through ClaimIdReserver).
// Record is two-phase so that a slow, presumed-dead owner can never overwrite
// the work of the next one:
//   BeginRecord(claim)  checks the claim is live and pins it (it can no longer
//                       expire or be superseded), then the caller persists,
//   CommitRecord(...)   installs the entry, releases the claim, wakes watchers
//   CancelRecord(...)   (persisting failed) unpins; the lease runs on.
//
// Who may act on a claim (ClaimKind): a client's claim is renewed, recorded
// and abandoned through the service (Authority checks which peer); the
// daemon's own TuneDense claim only by its job, and a Redis connection's
// claim only by the Redis server (a client's Renew, Record or Abandon of
// either is PERMISSION_DENIED, whoever sends it); a fleet stand-in
// (the local lease that shows another daemon's fleet claim as PENDING) is
// never a grant: Renew, Record and Abandon of it are FAILED_PRECONDITION
// naming the holder. A client claim whose fleet claim was lost is fenced
// (Fence): it ends, and its Renew, Record and Abandon are
// FAILED_PRECONDITION with the reason.
//
// Thread-safe. No method blocks on I/O except Claim, which reserves a new
// block of claim ids (one small SQLite write per claim_id_block claims).
// Watch callbacks run on the thread that caused the change, outside the
// arbiter's lock; they must not block.
#ifndef GPUTUNE_DAEMON_ARBITER_H_
#define GPUTUNE_DAEMON_ARBITER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/node_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "daemon/clock.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {

class ChangeFeed;     // daemon/change_feed.h
class DaemonMetrics;  // daemon/metrics.h

struct ArbiterOptions {
  absl::Duration default_ttl = absl::Seconds(30);
  absl::Duration min_ttl = absl::Milliseconds(100);
  absl::Duration max_ttl = absl::Hours(1);
  int backoff_abandons = 3;  // abandons within the window that trip BACKOFF
  absl::Duration backoff_window = absl::Minutes(5);
  absl::Duration backoff_cooldown = absl::Minutes(1);
  uint64_t claim_id_block = 1024;  // ids reserved per durable write
  // Stale-while-revalidate (gputuned --stale_while_revalidate=fingerprint):
  // an entry whose fingerprint differs from the daemon's but names the same
  // device model is stale-but-usable for its own candidate set. Off: STALE.
  bool stale_while_revalidate = true;
  // DeviceModel(fingerprint) of the daemon; unused without a fingerprint.
  std::string device_model;
  DaemonMetrics* metrics =
      nullptr;  // counts expiries and backoffs; may be null
};

// Durably reserves `count` fresh claim ids; returns the first.
using ClaimIdReserver = std::function<absl::StatusOr<uint64_t>(uint64_t)>;

// What a claim is, and who calls Renew, BeginRecord and Abandon.
enum class ClaimKind {
  kClient,   // a client's Claim through TuneService
  kDaemon,   // the daemon's own TuneDense job
  kStandIn,  // a fleet stand-in: another daemon holds the fleet claim
  kRedis,    // a Redis front-door connection's (daemon/redis): its SET records
};

class Arbiter {
 public:
  // `clock` must outlive the arbiter. `fingerprint_digest`: the digest of the
  // daemon's current fingerprint; nullopt when the device is unknown (then
  // entries are not judged by fingerprint).
  Arbiter(const ArbiterOptions& options, const Clock* clock,
          ClaimIdReserver reserver,
          std::optional<std::string> fingerprint_digest);

  // Adds an entry at start-up from what the store keeps for the index
  // (TuneStore::ForEachSummary): the serialized summary, its candidate set
  // and the digest of the entry's fingerprint. No parsing: restarts stay
  // fast. No watchers exist yet. `same_device_model`: the entry's
  // fingerprint names the daemon's device model (the caller learns it once
  // per distinct digest); it matters only when the digests differ.
  void LoadSummary(const std::string& key_id, std::string summary,
                   std::string candidate_set,
                   const std::string& fingerprint_digest,
                   bool same_device_model = false) ABSL_LOCKS_EXCLUDED(mu_);

  // A key's state and what explains it, as the index holds it.
  struct Found {
    v1::KeyState state = v1::KEY_STATE_MISS;
    // HIT and STALE: the entry without measurements and fingerprint, as
    // stored (a serialized v1::Entry, see proto/entry_summary.h). Shared
    // with the index and never changed: a lookup copies no entry.
    std::shared_ptr<const std::string> entry;
    std::string stale_reason;            // STALE: why
    bool stale_usable = false;           // STALE: the entry may be run
    std::optional<v1::ClaimInfo> claim;  // PENDING: the live claim
    absl::Time retry_after;  // BACKOFF: when claims are allowed again
  };
  // The state of `key`, which must be valid (ValidateKey): the hot path of
  // Lookup. No I/O, a reader lock. A stale-but-usable dense answer counts
  // one use of the key (an atomic add) for NextRevalidation.
  Found Find(const v1::Key& key) const ABSL_LOCKS_EXCLUDED(mu_);
  // Find of each key, in order (BatchLookup): the reader lock is taken once
  // per few hundred keys, so writers wait little behind a large batch.
  std::vector<Found> Find(absl::Span<const v1::Key* const> keys) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same for keys given by their KeyId, all of one candidate set: no
  // v1::Key is built (the Redis front door's MGET).
  std::vector<Found> FindIds(absl::Span<const std::string> key_ids,
                             absl::string_view candidate_set) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Find(key) as a KeyStatus, the entry parsed (Watch, TuneDense).
  v1::KeyStatus Lookup(const v1::Key& key) const ABSL_LOCKS_EXCLUDED(mu_);

  // GRANTED (a new claim of `kind`), PENDING, HIT or BACKOFF. ttl zero =
  // default. INVALID_ARGUMENT for a ttl outside [min_ttl, max_ttl];
  // UNAVAILABLE when no claim id could be reserved.
  absl::StatusOr<v1::ClaimResponse> Claim(const v1::Key& key,
                                          absl::string_view holder,
                                          absl::Duration ttl,
                                          ClaimKind kind = ClaimKind::kClient)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Extends a live lease to now + ttl and returns the new deadline.
  // FAILED_PRECONDITION when the claim expired, was superseded or released,
  // is a stand-in, or is fenced; PERMISSION_DENIED when `caller` may not act
  // on it (see ClaimKind above).
  absl::StatusOr<absl::Time> Renew(uint64_t claim_id, absl::Duration ttl,
                                   ClaimKind caller = ClaimKind::kClient)
      ABSL_LOCKS_EXCLUDED(mu_);

  // The fleet claim behind a live client claim was lost (another daemon
  // took it over): the claim ends now (no abandon is counted) and its
  // Renew, Record and Abandon are refused from now on with
  // FAILED_PRECONDITION carrying `reason`, so that the client claims the key
  // again (and learns from the fleet who holds it) instead of being told OK
  // for a result the fleet would replace. The last kMaxFenced reasons are
  // kept. The daemon's own job is not fenced, nor a claim being recorded:
  // its Record goes to the fleet, which refuses it and answers the canonical
  // entry (docs/architecture.md, "The fencing argument"). False when the
  // claim is not a live client claim.
  bool Fence(uint64_t claim_id, std::string reason) ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kMaxFenced = 1024;

  // What a Record needs to build and persist the entry.
  struct RecordTicket {
    uint64_t claim_id = 0;
    std::string key_id;
    v1::Key key;  // with the claimer's candidate set
    std::string holder;
  };
  // Checks the claim is live and `caller` may record it, and pins it.
  // FAILED_PRECONDITION or PERMISSION_DENIED otherwise (as for Renew).
  absl::StatusOr<RecordTicket> BeginRecord(
      uint64_t claim_id, ClaimKind caller = ClaimKind::kClient)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The entry is durable: the key turns HIT, the claim is released.
  void CommitRecord(const RecordTicket& ticket, const v1::Entry& entry)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Persisting failed: the claim is unpinned and its lease runs on.
  void CancelRecord(const RecordTicket& ticket) ABSL_LOCKS_EXCLUDED(mu_);

  // Releases a live claim: MISS, or BACKOFF when this abandon trips it.
  // FAILED_PRECONDITION when the claim is not live or is a stand-in;
  // PERMISSION_DENIED when `caller` may not act on it. (Callers log the
  // reason with `key`.)
  struct AbandonResult {
    v1::AbandonResponse response;
    v1::Key key;  // the claimed key
  };
  absl::StatusOr<AbandonResult> Abandon(uint64_t claim_id,
                                        ClaimKind caller = ClaimKind::kClient)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Entries that are durable already (imported, adopted from the fleet):
  // installed and watchers woken. A fleet stand-in on an installed key ends:
  // the entry it stood for has arrived.
  void Install(const std::vector<v1::Entry>& entries) ABSL_LOCKS_EXCLUDED(mu_);
  // Entries deleted from the store: dropped from the index, watchers woken.
  void Erase(const std::vector<std::string>& key_ids) ABSL_LOCKS_EXCLUDED(mu_);

  // Publishes every change of an entry (CommitRecord, Install, Erase) to
  // `feed`, numbered in the order the index changed. Set before serving (after
  // LoadSummary), or never; must outlive the arbiter's use.
  void set_change_feed(ChangeFeed* feed) { feed_ = feed; }

  // Calls fn with the key's current status, then after each change of it,
  // until Unwatch. Returns the watch id.
  using WatchFn = std::function<void(const v1::KeyStatus&)>;
  uint64_t Watch(const v1::Key& key, WatchFn fn) ABSL_LOCKS_EXCLUDED(mu_);
  void Unwatch(uint64_t watch_id) ABSL_LOCKS_EXCLUDED(mu_);

  // Ends expired leases and finished cool-downs and wakes their watchers.
  // Call periodically (the daemon does, every 100 ms); lookups see expiry
  // without it.
  void Sweep() ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    uint64_t entries = 0;
    uint64_t stale_entries = 0;         // fingerprint differs
    uint64_t stale_usable_entries = 0;  // of those, stale-but-usable
    uint32_t backoff_keys = 0;
    std::vector<std::pair<v1::Key, v1::ClaimInfo>> claims;
  };
  Stats GetStats() const ABSL_LOCKS_EXCLUDED(mu_);

  // Why `entry` is STALE for a caller with `candidate_set` (empty reason:
  // a HIT), and whether it is stale-but-usable, by this arbiter's rules
  // (GetEntry, which reads the entry from the store).
  struct Verdict {
    std::string stale_reason;
    bool stale_usable = false;
  };
  Verdict Judge(const v1::Entry& entry, absl::string_view candidate_set) const;

  // Stale-while-revalidate: the stale-but-usable dense_bf16 key (with its
  // entry's candidate set) most looked up since it became one, not tried
  // before and not claimed now; nullopt when there is none. Marks it tried:
  // each key is offered once per daemon run (a failed re-tune is not
  // retried until a restart or a new entry). Custom keys are never offered:
  // the daemon cannot run them. Scans the stale-but-usable keys under the
  // reader lock.
  struct Revalidation {
    v1::Key key;
    uint64_t lookups = 0;
  };
  std::optional<Revalidation> NextRevalidation() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Lease {
    uint64_t claim_id = 0;
    v1::Key key;
    std::string holder;
    absl::Time granted_at;
    absl::Time deadline;
    bool recording = false;  // pinned by BeginRecord
    ClaimKind kind = ClaimKind::kClient;
  };
  // Abandons and BACKOFF of one key. Most keys never have one; keeping it
  // out of Slot saves 32 bytes per entry (3 MiB per 100k entries).
  struct Cooldown {
    std::vector<absl::Time> abandons;  // within the window
    absl::Time backoff_until = absl::InfinitePast();
  };
  struct Slot {
    // The entry's summary (Found::entry); null when there is no entry.
    std::shared_ptr<const std::string> entry_summary;
    // Interned in candidate_sets_: a process has few, 100k entries one each.
    const std::string* entry_candidate_set = nullptr;
    bool fingerprint_matches = true;
    // The fingerprint differs, but names this device model and the policy
    // is on: stale-but-usable for the entry's candidate set.
    bool usable_when_stale = false;
    std::unique_ptr<Lease> lease;        // few keys have one: 8 bytes when not
    std::unique_ptr<Cooldown> cooldown;  // only keys abandoned lately
    bool has_entry() const { return entry_summary != nullptr; }
  };
  struct Watcher {
    uint64_t id;
    v1::Key key;
    WatchFn fn;
    // Notifications are delivered outside mu_, so two can race: the one
    // collected later (higher sequence) wins and older ones are dropped.
    absl::Mutex deliver_mu;
    uint64_t delivered_seq ABSL_GUARDED_BY(deliver_mu) = 0;
  };
  // Uses of a stale-but-usable dense key, counted on the (shared-locked)
  // lookup path, hence atomics; in a map of its own so that Slot stays
  // small for the keys that are not.
  struct UseCount {
    std::atomic<uint64_t> lookups{0};
    std::atomic<bool> tried{false};
  };
  struct Notification {
    std::shared_ptr<Watcher> watcher;
    v1::KeyStatus status;
    uint64_t seq;
  };

  bool LeaseLive(const Lease& lease, absl::Time now) const;
  static absl::Time BackoffUntil(const Slot& slot) {
    return slot.cooldown ? slot.cooldown->backoff_until : absl::InfinitePast();
  }
  // What the index says of a key of `candidate_set` whose slot is `slot`
  // (null: none).
  Found FindLocked(absl::string_view candidate_set, const Slot* slot,
                   absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // `found` for `key` as a KeyStatus, its entry parsed.
  static v1::KeyStatus StatusOf(const v1::Key& key, Found found);
  static Verdict VerdictFor(bool fingerprint_matches, bool usable_when_stale,
                            absl::string_view entry_candidate_set,
                            absl::string_view candidate_set);
  // Whether an entry whose fingerprint digest is `digest` is this device's
  // (always, without a fingerprint); whether one that is not is
  // stale-but-usable.
  bool FingerprintMatches(const std::string& digest) const;
  bool UsableWhenStale(bool fingerprint_matches, bool same_device_model) const;
  // One more use of key_id's stale-but-usable entry (Find).
  void CountUseLocked(absl::string_view key_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Find of keys 0..n-1: key i's id is id_of(i, &buffer) (a view of the
  // buffer or of the caller's own string), its candidate set set_of(i).
  template <typename IdOf, typename SetOf>
  std::vector<Found> FindEach(size_t n, IdOf id_of, SetOf set_of) const
      ABSL_LOCKS_EXCLUDED(mu_);
  v1::KeyStatus StatusLocked(const v1::Key& key, const Slot* slot,
                             absl::Time now) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return StatusOf(key, FindLocked(key.candidate_set(), slot, now));
  }
  void SetEntryLocked(const std::string& key_id, std::string summary,
                      std::string candidate_set, bool fingerprint_matches,
                      bool usable_when_stale)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the slot's entry from the counters (and its use count).
  void ForgetEntryLocked(const std::string& key_id, const Slot& slot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetEntryLocked(const std::string& key_id, const v1::Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Statuses for every watcher of key_id, to deliver after unlocking.
  void CollectLocked(const std::string& key_id, absl::Time now,
                     std::vector<Notification>* out) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a slot that holds nothing.
  void MaybeEraseSlotLocked(const std::string& key_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<uint64_t> NextClaimIdLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Slot*> LiveClaimLocked(uint64_t claim_id, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // LiveClaimLocked, and whether `caller` may act on the claim (ClaimKind).
  absl::StatusOr<Slot*> ActionableClaimLocked(uint64_t claim_id, absl::Time now,
                                              ClaimKind caller)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static void Deliver(const std::vector<Notification>& notes);
  // The candidate set of key_id's entry; empty when it has none.
  std::string EntryCandidateSetLocked(const std::string& key_id) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Publishes to feed_ (if set) that key_id's entry was recorded (its new
  // entry) or is being deleted (the entry still in the slot).
  void PublishLocked(v1::ChangeKind kind, const std::string& key_id,
                     std::string replaced_candidate_set)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FlushFeed() const;

  // Constant after construction.
  const ArbiterOptions options_;
  const Clock* const clock_;
  const ClaimIdReserver reserver_;
  const std::optional<std::string> fingerprint_digest_;
  ChangeFeed* feed_ = nullptr;  // set before serving; may stay null

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Slot> slots_ ABSL_GUARDED_BY(mu_);
  // Every candidate set an entry was tuned for; never shrinks (there are a
  // handful, one per client library and kernel set).
  absl::node_hash_set<std::string> candidate_sets_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::string> claims_ ABSL_GUARDED_BY(mu_);
  // Fenced claims' reasons (Fence), the newest kMaxFenced, oldest first in
  // fenced_order_.
  absl::flat_hash_map<uint64_t, std::string> fenced_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> fenced_order_ ABSL_GUARDED_BY(mu_);
  // Keys whose cool-down has not been swept yet (a few; the sweep visits only
  // these, never every entry).
  absl::flat_hash_set<std::string> backoff_keys_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::vector<std::shared_ptr<Watcher>>>
      watchers_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::string> watch_keys_ ABSL_GUARDED_BY(mu_);
  uint64_t next_watch_id_ ABSL_GUARDED_BY(mu_) = 1;
  mutable uint64_t change_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_claim_id_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t claim_id_limit_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stale_entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stale_usable_entries_ ABSL_GUARDED_BY(mu_) = 0;
  // Stale-but-usable dense keys (the ones NextRevalidation may offer).
  absl::flat_hash_map<std::string, std::unique_ptr<UseCount>> uses_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace gputune

#endif  // GPUTUNE_DAEMON_ARBITER_H_
