#include "storage/tune_store.h"

#include <sys/stat.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "proto/entry_summary.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"

namespace gputune::storage {
namespace {

constexpr char kSchemaV1[] = R"sql(
CREATE TABLE entries (
  key_id      TEXT PRIMARY KEY,
  op          TEXT NOT NULL,
  phase       INTEGER NOT NULL,
  role        TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  candidate_set TEXT NOT NULL,
  updated_at  INTEGER NOT NULL,
  summary     BLOB NOT NULL,
  entry       BLOB NOT NULL
) WITHOUT ROWID;
CREATE INDEX entries_by_op ON entries (op, phase, role);
CREATE TABLE meta (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
PRAGMA user_version = 1;
)sql";

// Every migration takes the schema from version i to i + 1.
constexpr const char* kMigrations[] = {kSchemaV1};
static_assert(std::size(kMigrations) == TuneStore::kSchemaVersion);

// WAL mode and a quick_check: DATA_LOSS when the file is corrupt or not a
// database at all.
absl::Status Configure(Connection& db, bool synchronous_full) {
  if (auto s = db.Exec("PRAGMA busy_timeout = 5000"); !s.ok()) return s;
  absl::StatusOr<Statement> mode = db.Prepare("PRAGMA journal_mode = WAL");
  if (!mode.ok()) return mode.status();
  if (absl::StatusOr<bool> row = mode->Step(); !row.ok()) return row.status();
  absl::StatusOr<Statement> check = db.Prepare("PRAGMA quick_check");
  if (!check.ok()) return check.status();
  absl::StatusOr<bool> row = check->Step();
  if (!row.ok()) return row.status();
  if (*row && check->ColumnText(0) != "ok") {
    return absl::DataLossError(
        absl::StrCat("quick_check: ", check->ColumnText(0)));
  }
  return db.Exec(synchronous_full ? "PRAGMA synchronous = FULL"
                                  : "PRAGMA synchronous = NORMAL");
}

// Moves path, path-wal and path-shm aside under one timestamped name; returns
// the new name of the main file.
absl::StatusOr<std::string> Quarantine(const std::string& path) {
  const std::string stamp =
      absl::FormatTime("%Y%m%dT%H%M%SZ", absl::Now(), absl::UTCTimeZone());
  const std::string target = absl::StrCat(path, ".corrupt-", stamp);
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string from = absl::StrCat(path, suffix);
    std::error_code ec;
    if (!std::filesystem::exists(from, ec)) continue;
    std::filesystem::rename(from, absl::StrCat(target, suffix), ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot move corrupt ", from, " aside: ", ec.message()));
    }
  }
  return target;
}

absl::Status Migrate(Connection& db, OpenReport* report) {
  absl::StatusOr<int64_t> version = db.QueryInt("PRAGMA user_version");
  if (!version.ok()) return version.status();
  report->schema_version_found = static_cast<int>(*version);
  if (*version > TuneStore::kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "database schema version ", *version,
        " is newer than this gputuned understands (", TuneStore::kSchemaVersion,
        "): upgrade gputuned, or point --db at another file"));
  }
  for (int64_t v = *version; v < TuneStore::kSchemaVersion; ++v) {
    if (auto s = db.Exec(
            absl::StrCat("BEGIN IMMEDIATE;", kMigrations[v], "COMMIT;"));
        !s.ok()) {
      (void)db.Exec("ROLLBACK");
      return absl::Status(s.code(), absl::StrCat("migrating schema to v", v + 1,
                                                 ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

// DATA_LOSS when the tables are not those of the schema version the file
// claims: every column the store reads must be there.
absl::Status CheckSchema(Connection& db) {
  for (const char* sql :
       {"SELECT key_id, op, phase, role, fingerprint, candidate_set, "
        "updated_at, summary, entry FROM entries LIMIT 0",
        "SELECT name, value FROM meta LIMIT 0"}) {
    if (absl::StatusOr<Statement> st = db.Prepare(sql); !st.ok()) {
      return absl::DataLossError(
          absl::StrCat("tables do not match schema version ",
                       TuneStore::kSchemaVersion, ": ", st.status().message()));
    }
  }
  return absl::OkStatus();
}

// Configure, migrate and check the schema of an open database.
absl::Status Prepare(Connection& db, bool synchronous_full,
                     OpenReport* report) {
  if (auto s = Configure(db, synchronous_full); !s.ok()) return s;
  if (auto s = Migrate(db, report); !s.ok()) return s;
  return CheckSchema(db);
}

int PhaseOf(const v1::Entry& entry) {
  return entry.key().has_dense_bf16() ? entry.key().dense_bf16().phase() : 0;
}

// WHERE clause for a query; parameters bound by BindQuery in the same order.
std::string WhereClause(const EntryQuery& q) {
  std::string where = " WHERE 1";
  if (!q.op.empty()) absl::StrAppend(&where, " AND op = ?");
  if (q.phase != 0) absl::StrAppend(&where, " AND phase = ?");
  if (!q.role.empty()) absl::StrAppend(&where, " AND role = ?");
  if (!q.fingerprint.empty()) {
    absl::StrAppend(&where, q.fingerprint_match ? " AND fingerprint = ?"
                                                : " AND fingerprint <> ?");
  }
  return where;
}

int BindQuery(Statement& st, const EntryQuery& q) {
  int i = 0;
  if (!q.op.empty()) st.BindText(++i, q.op);
  if (q.phase != 0) st.BindInt(++i, q.phase);
  if (!q.role.empty()) st.BindText(++i, q.role);
  if (!q.fingerprint.empty()) st.BindText(++i, q.fingerprint);
  return i;
}

absl::Status ParseEntry(const std::string& blob, const std::string& key_id,
                        v1::Entry* entry) {
  if (!entry->ParseFromString(blob)) {
    return absl::DataLossError(
        absl::StrCat("entry for ", key_id, " does not parse"));
  }
  return absl::OkStatus();
}

// DATA_LOSS when the file exists with content that is not an SQLite
// database. Checked before SQLite opens it, because SQLite may discard the
// -wal and -shm files of a file it cannot read, and those belong in
// quarantine too.
absl::Status CheckHeader(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::OkStatus();  // new file
  char header[16] = {};
  in.read(header, sizeof(header));
  if (in.gcount() == 0) return absl::OkStatus();  // empty: SQLite's to create
  if (in.gcount() < 16 || std::memcmp(header, "SQLite format 3", 16) != 0) {
    return absl::DataLossError("not an SQLite database (bad header)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TuneStore>> TuneStore::Open(
    const StoreOptions& options, OpenReport* report) {
  absl::Status health = CheckHeader(options.path);
  absl::StatusOr<Connection> db = Connection();
  if (health.ok()) {
    db = Connection::Open(options.path);
    if (!db.ok()) return db.status();
    health = Prepare(*db, options.synchronous_full, report);
  }
  if (health.code() == absl::StatusCode::kDataLoss) {
    *db = Connection();  // close before moving the files
    absl::StatusOr<std::string> moved = Quarantine(options.path);
    if (!moved.ok()) return moved.status();
    report->quarantined_to = *moved;
    report->quarantine_reason = std::string(health.message());
    db = Connection::Open(options.path);
    if (!db.ok()) return db.status();
    health = Prepare(*db, options.synchronous_full, report);
  }
  if (!health.ok()) return health;
  return std::unique_ptr<TuneStore>(
      new TuneStore(options.path, std::move(*db)));
}

absl::Status TuneStore::ForEachSummary(
    const std::function<void(std::string key_id, std::string summary,
                             std::string candidate_set,
                             std::string fingerprint)>& fn) {
  constexpr int kPage = 4096;
  std::string after;
  while (true) {
    std::vector<std::array<std::string, 4>> rows;
    {
      absl::MutexLock lock(&mu_);
      absl::StatusOr<Statement> st = db_.Prepare(
          "SELECT key_id, summary, candidate_set, fingerprint FROM entries "
          "WHERE key_id > ?1 ORDER BY key_id LIMIT ?2");
      if (!st.ok()) return st.status();
      st->BindText(1, after);
      st->BindInt(2, kPage);
      while (true) {
        absl::StatusOr<bool> row = st->Step();
        if (!row.ok()) return row.status();
        if (!*row) break;
        rows.push_back({st->ColumnText(0), st->ColumnBlob(1), st->ColumnText(2),
                        st->ColumnText(3)});
      }
    }
    if (!rows.empty()) after = rows.back()[0];
    for (auto& r : rows) {
      fn(std::move(r[0]), std::move(r[1]), std::move(r[2]), std::move(r[3]));
    }
    if (static_cast<int>(rows.size()) < kPage) return absl::OkStatus();
  }
}

absl::Status TuneStore::PutLocked(const v1::Entry& entry) {
  absl::StatusOr<Statement> st = db_.Prepare(
      "INSERT OR REPLACE INTO entries (key_id, op, phase, role, fingerprint, "
      "candidate_set, updated_at, summary, entry) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
  if (!st.ok()) return st.status();
  st->BindText(1, KeyId(entry.key()));
  st->BindText(2, KeyOp(entry.key()));
  st->BindInt(3, PhaseOf(entry));
  st->BindText(4, entry.key().has_dense_bf16() ? entry.key().dense_bf16().role()
                                               : std::string());
  st->BindText(5, FingerprintDigest(entry.fingerprint()));
  st->BindText(6, entry.key().candidate_set());
  st->BindInt(7, absl::ToUnixMillis(absl::Now()));
  st->BindBlob(8, SerializedEntrySummary(entry));
  st->BindBlob(9, entry.SerializeAsString());
  return st->Run();
}

absl::Status TuneStore::Put(const v1::Entry& entry) {
  absl::MutexLock lock(&mu_);
  return PutLocked(entry);
}

absl::Status TuneStore::PutAll(const std::vector<v1::Entry>& entries) {
  return PutAllWith(entries, nullptr);
}

absl::Status TuneStore::PutAllWith(const std::vector<v1::Entry>& entries,
                                   const SideWrite& also) {
  absl::MutexLock lock(&mu_);
  if (auto s = db_.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::Status s;
  for (const v1::Entry& entry : entries) {
    if (s = PutLocked(entry); !s.ok()) break;
  }
  if (s.ok() && also) s = also(db_);
  if (s.ok()) s = db_.Exec("COMMIT");
  if (!s.ok()) (void)db_.Exec("ROLLBACK");
  return s;
}

absl::Status TuneStore::Transact(const SideWrite& fn) {
  return PutAllWith({}, fn);
}

absl::StatusOr<std::optional<v1::Entry>> TuneStore::Get(
    const std::string& key_id) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Statement> st =
      db_.Prepare("SELECT entry FROM entries WHERE key_id = ?1");
  if (!st.ok()) return st.status();
  st->BindText(1, key_id);
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return std::optional<v1::Entry>();
  v1::Entry entry;
  if (auto s = ParseEntry(st->ColumnBlob(0), key_id, &entry); !s.ok()) return s;
  return std::optional<v1::Entry>(std::move(entry));
}

absl::StatusOr<std::vector<v1::Entry>> TuneStore::List(const EntryQuery& query,
                                                       const std::string& after,
                                                       int limit) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Statement> st = db_.Prepare(
      absl::StrCat("SELECT key_id, entry FROM entries", WhereClause(query),
                   " AND key_id > ? ORDER BY key_id LIMIT ?"));
  if (!st.ok()) return st.status();
  int i = BindQuery(*st, query);
  st->BindText(++i, after);
  st->BindInt(++i, limit);
  std::vector<v1::Entry> out;
  while (true) {
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    v1::Entry& entry = out.emplace_back();
    if (auto s = ParseEntry(st->ColumnBlob(1), st->ColumnText(0), &entry);
        !s.ok()) {
      return s;
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> TuneStore::Delete(
    const std::vector<std::string>& key_ids) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Statement> st =
      db_.Prepare("DELETE FROM entries WHERE key_id = ?1");
  if (!st.ok()) return st.status();
  if (auto s = db_.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  std::vector<std::string> deleted;
  for (const std::string& id : key_ids) {
    st->BindText(1, id);
    if (auto s = st->Run(); !s.ok()) {
      (void)db_.Exec("ROLLBACK");
      return s;
    }
    if (db_.Changes() > 0) deleted.push_back(id);
  }
  if (auto s = db_.Exec("COMMIT"); !s.ok()) {
    (void)db_.Exec("ROLLBACK");
    return s;
  }
  return deleted;
}

absl::StatusOr<std::vector<std::string>> TuneStore::DeleteMatching(
    const EntryQuery& query) {
  absl::MutexLock lock(&mu_);
  absl::StatusOr<Statement> st = db_.Prepare(absl::StrCat(
      "DELETE FROM entries", WhereClause(query), " RETURNING key_id"));
  if (!st.ok()) return st.status();
  BindQuery(*st, query);
  std::vector<std::string> deleted;
  while (true) {
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    deleted.push_back(st->ColumnText(0));
  }
  return deleted;
}

absl::StatusOr<int64_t> TuneStore::Count() {
  absl::MutexLock lock(&mu_);
  return db_.QueryInt("SELECT COUNT(*) FROM entries");
}

absl::StatusOr<uint64_t> TuneStore::ReserveClaimIds(uint64_t count) {
  absl::MutexLock lock(&mu_);
  if (auto s = db_.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::StatusOr<int64_t> next = db_.QueryInt(
      "SELECT COALESCE((SELECT value FROM meta WHERE name = 'next_claim_id'), "
      "1)");
  if (!next.ok()) {
    (void)db_.Exec("ROLLBACK");
    return next.status();
  }
  absl::StatusOr<Statement> st = db_.Prepare(
      "INSERT OR REPLACE INTO meta (name, value) VALUES ('next_claim_id', ?1)");
  if (!st.ok()) {
    (void)db_.Exec("ROLLBACK");
    return st.status();
  }
  st->BindInt(1, *next + static_cast<int64_t>(count));
  if (auto s = st->Run(); !s.ok()) {
    (void)db_.Exec("ROLLBACK");
    return s;
  }
  if (auto s = db_.Exec("COMMIT"); !s.ok()) {
    (void)db_.Exec("ROLLBACK");
    return s;
  }
  return static_cast<uint64_t>(*next);
}

absl::StatusOr<uint64_t> TuneStore::Backup(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    return absl::AlreadyExistsError(
        absl::StrCat(path, " exists: choose a new file name for the backup"));
  }
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<Statement> st = db_.Prepare("VACUUM INTO ?1");
    if (!st.ok()) return st.status();
    st->BindText(1, path);
    if (auto s = st->Run(); !s.ok()) return s;
  }
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::InternalError(absl::StrCat(path, ": ", ec.message()));
  return static_cast<uint64_t>(size);
}

}  // namespace gputune::storage
