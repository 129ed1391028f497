// TuneStore: the durable tune cache, one SQLite database per daemon.
//
// Schema (PRAGMA user_version = 1):
//   entries(key_id TEXT PRIMARY KEY, op, phase, role, fingerprint (digest),
//           candidate_set, updated_at,
//           summary BLOB,  -- serialized entry summary (what lookups return)
//           entry BLOB)    -- the serialized gputune.v1.Entry
//   meta(name TEXT PRIMARY KEY, value INTEGER)  -- e.g. the claim-id epoch
//   quarantine(key_id, reason, quarantined_at, summary BLOB, entry BLOB)
//                -- damaged rows moved out of entries, kept for inspection
//                   (created when missing; older binaries ignore it)
//
// The database runs in WAL mode; with synchronous=FULL (the default) a Put
// that returned OK survives power loss, with NORMAL it survives a crash of
// the process (kill -9) but not of the machine. Open() checks the file with
// quick_check; a corrupt file (or one that is not a database) is moved aside
// together with its -wal and -shm files under a timestamped name, and a fresh
// database is created: the daemon keeps serving and reports the quarantine.
// So is a file whose tables are not this schema's (a foreign `entries`).
//
// One damaged row does not take down the rest: a row whose stored bytes do
// not parse (or name another key) is moved to the quarantine table when it
// is read - its summary at load (ForEachSummary), its entry by Get and List
// - and is then a
// MISS, re-tunable like any other.
//
// The file (and its -wal/-shm, which SQLite creates with the same mode) is
// created 0640: tuning data is not for every local user.
//
// Thread-safe: every method may be called from any thread (one connection,
// serialised by a mutex). Methods block on disk I/O: never call them from a
// gRPC reaction.
#ifndef GPUTUNE_STORAGE_TUNE_STORE_H_
#define GPUTUNE_STORAGE_TUNE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gputune/v1/tune.pb.h"
#include "storage/sqlite.h"

namespace gputune::storage {

struct StoreOptions {
  std::string path;              // database file; its directory must exist
  bool synchronous_full = true;  // FULL (power-loss safe) or NORMAL
};

// What Open() found and did.
struct OpenReport {
  int schema_version_found = 0;  // 0 for a new database
  std::string quarantined_to;    // non-empty when a corrupt file was moved
  std::string quarantine_reason;
};

// Rows moved to the quarantine table (this start and earlier ones).
struct QuarantineInfo {
  uint64_t count = 0;
  // The most recent key ids (at most kShown), newest last.
  static constexpr size_t kShown = 16;
  std::vector<std::string> recent_key_ids;
};

// One page of List.
struct ListPage {
  std::vector<v1::Entry> entries;
  // The last key id read (also of a damaged row); empty when none.
  std::string last_key_id;
  // Rows read, damaged ones included: a full page is `limit` rows.
  int rows = 0;
  // Key ids of damaged rows moved to quarantine on the way.
  std::vector<std::string> quarantined;
};

// Which entries a List/Delete touches. Empty fields match everything.
struct EntryQuery {
  std::string op;
  int phase = 0;  // v1::Phase; 0 = any
  std::string role;
  // When set: only entries whose fingerprint digest equals (match=true) or
  // differs from (match=false) this one.
  std::string fingerprint;
  bool fingerprint_match = true;
};

class TuneStore {
 public:
  static constexpr int kSchemaVersion = 1;

  // Opens or creates the database, quarantining a corrupt one (see above).
  // Fails with FAILED_PRECONDITION for a schema newer than kSchemaVersion
  // (nothing is touched), PERMISSION_DENIED / INTERNAL when the file cannot
  // be opened or created.
  static absl::StatusOr<std::unique_ptr<TuneStore>> Open(
      const StoreOptions& options, OpenReport* report);

  // Calls fn for every entry with what the in-memory index needs (key id,
  // serialized entry summary, candidate set, fingerprint digest), in key
  // order, a page at a time, without holding the store's lock. Each row's
  // summary (what lookups serve) is parsed and must name the row's key: a
  // damaged one is quarantined instead of passed on. (Full entries are
  // checked by Get and List, which read them.)
  absl::Status ForEachSummary(
      const std::function<void(std::string key_id, std::string summary,
                               std::string candidate_set,
                               std::string fingerprint)>& fn);

  // Inserts or replaces the entry for its key. Durable when OK.
  absl::Status Put(const v1::Entry& entry);
  // Like Put for many entries in one transaction: all or none.
  absl::Status PutAll(const std::vector<v1::Entry>& entries);

  // Statements of another module on the store's connection, in the same
  // transaction as the entries it writes (the fleet tier's outbox and feed
  // position live in tables of their own in this file). Must not call the
  // store; the tables it touches are its own to create.
  using SideWrite = std::function<absl::Status(Connection& db)>;
  // PutAll(entries) and `also` in one transaction: all durable, or none.
  absl::Status PutAllWith(const std::vector<v1::Entry>& entries,
                          const SideWrite& also);
  // `fn` alone, in one transaction (rolled back when it fails).
  absl::Status Transact(const SideWrite& fn);

  // The entry for a key id, or nullopt (also for a damaged row, which is
  // quarantined; *quarantined is then set when given).
  absl::StatusOr<std::optional<v1::Entry>> Get(const std::string& key_id,
                                               bool* quarantined = nullptr);

  // Up to `limit` rows matching `query` with key_id > after, in key order;
  // damaged rows are quarantined and skipped.
  absl::StatusOr<ListPage> List(const EntryQuery& query,
                                const std::string& after, int limit);

  // What the quarantine table holds. Never blocks on disk.
  QuarantineInfo quarantined() const ABSL_LOCKS_EXCLUDED(quarantine_mu_);

  // Deletes these key ids; returns the ids that existed.
  absl::StatusOr<std::vector<std::string>> Delete(
      const std::vector<std::string>& key_ids);
  // Deletes every entry matching the query; returns their ids.
  absl::StatusOr<std::vector<std::string>> DeleteMatching(
      const EntryQuery& query);

  absl::StatusOr<int64_t> Count();

  // Reserves `count` consecutive claim ids that no earlier reservation (in
  // this or any earlier process on this database) handed out; returns the
  // first. Ids are epoch << kClaimSequenceBits | sequence: each process takes
  // a new epoch at Open, max(stored epoch + 1, unix milliseconds now),
  // durable before any id of it is handed out. So ids increase across
  // restarts and stay unique even when the database lost its tail (a
  // destroyed WAL takes the stored epoch back, but not the clock), as long as
  // the clock does not step back across a restart. A process that exhausts
  // its 2^20 sequences takes the next epoch the same way. Ids stay below
  // 2^63 until the year 2248.
  absl::StatusOr<uint64_t> ReserveClaimIds(uint64_t count);
  static constexpr int kClaimSequenceBits = 20;

  // Writes a consistent copy of the database to `path` (VACUUM INTO) while
  // serving, then verifies it (it opens, passes quick_check and holds the
  // entries the database held) and syncs it to disk; returns its size. The
  // file is created new (0640; never through a symlink): ALREADY_EXISTS if
  // anything is at path. On any failure the partial file is removed and the
  // error says why (e.g. RESOURCE_EXHAUSTED for a full disk).
  absl::StatusOr<uint64_t> Backup(const std::string& path);

  const std::string& path() const { return path_; }

 private:
  TuneStore(std::string path, Connection db)
      : path_(std::move(path)), db_(std::move(db)) {}
  absl::Status PutLocked(const v1::Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves a row to the quarantine table (one transaction).
  absl::Status QuarantineRowLocked(const std::string& key_id,
                                   const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadQuarantineInfo() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status StartClaimEpoch() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status NewClaimEpochLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  Connection db_ ABSL_GUARDED_BY(mu_);
  uint64_t claim_epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_claim_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  mutable absl::Mutex quarantine_mu_ ABSL_ACQUIRED_AFTER(mu_);
  QuarantineInfo quarantine_ ABSL_GUARDED_BY(quarantine_mu_);
};

}  // namespace gputune::storage

#endif  // GPUTUNE_STORAGE_TUNE_STORE_H_
