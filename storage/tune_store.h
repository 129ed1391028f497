// TuneStore: the durable tune cache, one SQLite database per daemon.
//
// Schema (PRAGMA user_version = 1):
//   entries(key_id TEXT PRIMARY KEY, op, phase, role, fingerprint (digest),
//           candidate_set, updated_at,
//           summary BLOB,  -- serialized entry summary (what lookups return)
//           entry BLOB)    -- the serialized gputune.v1.Entry
//   meta(name TEXT PRIMARY KEY, value INTEGER)  -- e.g. the claim-id high water
//
// The database runs in WAL mode; with synchronous=FULL (the default) a Put
// that returned OK survives power loss, with NORMAL it survives a crash of
// the process (kill -9) but not of the machine. Open() checks the file with
// quick_check; a corrupt file (or one that is not a database) is moved aside
// together with its -wal and -shm files under a timestamped name, and a fresh
// database is created: the daemon keeps serving and reports the quarantine.
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
  // order, a page at a time, without holding the store's lock. Parses
  // nothing: a restart with 100k entries stays fast.
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

  // The entry for a key id, or nullopt.
  absl::StatusOr<std::optional<v1::Entry>> Get(const std::string& key_id);

  // Up to `limit` entries matching `query` with key_id > after, in key order.
  absl::StatusOr<std::vector<v1::Entry>> List(const EntryQuery& query,
                                              const std::string& after,
                                              int limit);

  // Deletes these key ids; returns the ids that existed.
  absl::StatusOr<std::vector<std::string>> Delete(
      const std::vector<std::string>& key_ids);
  // Deletes every entry matching the query; returns their ids.
  absl::StatusOr<std::vector<std::string>> DeleteMatching(
      const EntryQuery& query);

  absl::StatusOr<int64_t> Count();

  // Reserves `count` claim ids that no earlier reservation (in this or any
  // earlier process on this database) handed out; returns the first. The
  // reservation is durable before it returns, which is what makes claim ids
  // fencing tokens across restarts.
  absl::StatusOr<uint64_t> ReserveClaimIds(uint64_t count);

  // Writes a consistent copy of the database to `path` (VACUUM INTO) while
  // serving; returns its size. ALREADY_EXISTS if path exists.
  absl::StatusOr<uint64_t> Backup(const std::string& path);

  const std::string& path() const { return path_; }

 private:
  TuneStore(std::string path, Connection db)
      : path_(std::move(path)), db_(std::move(db)) {}
  absl::Status PutLocked(const v1::Entry& entry)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  Connection db_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gputune::storage

#endif  // GPUTUNE_STORAGE_TUNE_STORE_H_
