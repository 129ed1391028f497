#include "storage/tune_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
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

// Not part of a schema version: created when missing, ignored by binaries
// that predate it.
constexpr char kQuarantineTable[] = R"sql(
CREATE TABLE IF NOT EXISTS quarantine (
  key_id         TEXT NOT NULL,
  reason         TEXT NOT NULL,
  quarantined_at INTEGER NOT NULL,
  summary        BLOB,
  entry          BLOB
);
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
  if (*version == 0) {
    // A new database has no tables. One with tables but no version was not
    // written by gputuned: quarantined like any other unusable file.
    absl::StatusOr<int64_t> tables = db.QueryInt(
        "SELECT COUNT(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'");
    if (!tables.ok()) return tables.status();
    if (*tables > 0) {
      return absl::DataLossError(
          "not a gputune database: it has tables but no schema version");
    }
  }
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
  if (auto s = CheckSchema(db); !s.ok()) return s;
  if (auto s = db.Exec(kQuarantineTable); !s.ok()) return s;
  absl::StatusOr<Statement> st = db.Prepare(
      "SELECT key_id, reason, quarantined_at, summary, entry FROM quarantine "
      "LIMIT 0");
  if (!st.ok()) {
    return absl::DataLossError(absl::StrCat(
        "table quarantine is not gputune's: ", st.status().message()));
  }
  return absl::OkStatus();
}

// Creates the database file 0640 before SQLite does (SQLite would use
// 0644 & ~umask, and gives -wal/-shm the main file's mode).
absl::Status CreateFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (fd < 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno),
                     " (is the directory writable by gputuned's user?)"));
  }
  close(fd);
  return absl::OkStatus();
}

// Why a row's stored summary (what lookups serve) is unusable; empty when it
// parses and names the row's key. Full entries are checked when read (Get,
// List): parsing all of them at load took seconds at 100k entries.
std::string CheckSummary(const std::string& key_id, const std::string& summary,
                         v1::Entry* scratch) {
  if (!scratch->ParseFromString(summary)) return "summary does not parse";
  if (KeyId(scratch->key()) != key_id) return "summary names another key";
  return "";
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

// Why a stored entry is unusable; empty when it parses and names its key.
std::string ParseEntry(const std::string& blob, const std::string& key_id,
                       v1::Entry* entry) {
  if (!entry->ParseFromString(blob)) return "entry does not parse";
  if (KeyId(entry->key()) != key_id) return "entry names another key";
  return "";
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
  if (health.ok()) health = CreateFile(options.path);
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
    if (auto s = CreateFile(options.path); !s.ok()) return s;
    db = Connection::Open(options.path);
    if (!db.ok()) return db.status();
    health = Prepare(*db, options.synchronous_full, report);
  }
  if (!health.ok()) return health;
  std::unique_ptr<TuneStore> store(new TuneStore(options.path, std::move(*db)));
  absl::MutexLock lock(&store->mu_);
  if (auto s = store->LoadQuarantineInfo(); !s.ok()) return s;
  if (auto s = store->StartClaimEpoch(); !s.ok()) return s;
  return store;
}

absl::Status TuneStore::ForEachSummary(
    const std::function<void(std::string key_id, std::string summary,
                             std::string candidate_set,
                             std::string fingerprint)>& fn) {
  constexpr int kPage = 4096;
  std::string after;
  while (true) {
    std::vector<std::array<std::string, 4>> rows;
    std::vector<std::pair<std::string, std::string>> damaged;  // id, reason
    size_t read = 0;
    {
      absl::MutexLock lock(&mu_);
      {
        absl::StatusOr<Statement> st = db_.Prepare(
            "SELECT key_id, summary, candidate_set, fingerprint FROM "
            "entries WHERE key_id > ?1 ORDER BY key_id LIMIT ?2");
        if (!st.ok()) return st.status();
        st->BindText(1, after);
        st->BindInt(2, kPage);
        v1::Entry scratch;
        while (true) {
          absl::StatusOr<bool> row = st->Step();
          if (!row.ok()) return row.status();
          if (!*row) break;
          ++read;
          std::string key_id = st->ColumnText(0);
          std::string summary = st->ColumnBlob(1);
          after = key_id;
          if (std::string why = CheckSummary(key_id, summary, &scratch);
              !why.empty()) {
            damaged.emplace_back(std::move(key_id), std::move(why));
            continue;
          }
          rows.push_back({std::move(key_id), std::move(summary),
                          st->ColumnText(2), st->ColumnText(3)});
        }
      }
      for (const auto& [id, why] : damaged) {
        if (auto s = QuarantineRowLocked(id, why); !s.ok()) return s;
      }
    }
    for (auto& r : rows) {
      fn(std::move(r[0]), std::move(r[1]), std::move(r[2]), std::move(r[3]));
    }
    if (static_cast<int>(read) < kPage) return absl::OkStatus();
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
    const std::string& key_id, bool* quarantined) {
  absl::MutexLock lock(&mu_);
  std::string why;
  v1::Entry entry;
  {
    absl::StatusOr<Statement> st =
        db_.Prepare("SELECT entry FROM entries WHERE key_id = ?1");
    if (!st.ok()) return st.status();
    st->BindText(1, key_id);
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) return std::optional<v1::Entry>();
    why = ParseEntry(st->ColumnBlob(0), key_id, &entry);
  }
  if (!why.empty()) {
    if (auto s = QuarantineRowLocked(key_id, why); !s.ok()) return s;
    if (quarantined != nullptr) *quarantined = true;
    return std::optional<v1::Entry>();
  }
  return std::optional<v1::Entry>(std::move(entry));
}

absl::StatusOr<ListPage> TuneStore::List(const EntryQuery& query,
                                         const std::string& after, int limit) {
  absl::MutexLock lock(&mu_);
  ListPage page;
  std::vector<std::string> reasons;
  {
    absl::StatusOr<Statement> st = db_.Prepare(
        absl::StrCat("SELECT key_id, entry FROM entries", WhereClause(query),
                     " AND key_id > ? ORDER BY key_id LIMIT ?"));
    if (!st.ok()) return st.status();
    int i = BindQuery(*st, query);
    st->BindText(++i, after);
    st->BindInt(++i, limit);
    while (true) {
      absl::StatusOr<bool> row = st->Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      ++page.rows;
      page.last_key_id = st->ColumnText(0);
      v1::Entry entry;
      if (std::string why =
              ParseEntry(st->ColumnBlob(1), page.last_key_id, &entry);
          !why.empty()) {
        page.quarantined.push_back(page.last_key_id);
        reasons.push_back(std::move(why));
        continue;
      }
      page.entries.push_back(std::move(entry));
    }
  }
  for (size_t i = 0; i < page.quarantined.size(); ++i) {
    if (auto s = QuarantineRowLocked(page.quarantined[i], reasons[i]);
        !s.ok()) {
      return s;
    }
  }
  return page;
}

absl::Status TuneStore::QuarantineRowLocked(const std::string& key_id,
                                            const std::string& reason) {
  if (auto s = db_.Exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  absl::Status s;
  {
    absl::StatusOr<Statement> copy = db_.Prepare(
        "INSERT INTO quarantine (key_id, reason, quarantined_at, summary, "
        "entry) SELECT key_id, ?2, ?3, summary, entry FROM entries WHERE "
        "key_id = ?1");
    absl::StatusOr<Statement> remove =
        db_.Prepare("DELETE FROM entries WHERE key_id = ?1");
    if (!copy.ok()) {
      s = copy.status();
    } else if (!remove.ok()) {
      s = remove.status();
    } else {
      copy->BindText(1, key_id);
      copy->BindText(2, reason);
      copy->BindInt(3, absl::ToUnixMillis(absl::Now()));
      remove->BindText(1, key_id);
      s = copy->Run();
      if (s.ok()) s = remove->Run();
    }
  }
  if (s.ok()) s = db_.Exec("COMMIT");
  if (!s.ok()) {
    (void)db_.Exec("ROLLBACK");
    return absl::Status(
        s.code(), absl::StrCat("quarantining the damaged entry ", key_id, ": ",
                               s.message()));
  }
  absl::MutexLock lock(&quarantine_mu_);
  ++quarantine_.count;
  quarantine_.recent_key_ids.push_back(key_id);
  if (quarantine_.recent_key_ids.size() > QuarantineInfo::kShown) {
    quarantine_.recent_key_ids.erase(quarantine_.recent_key_ids.begin());
  }
  return absl::OkStatus();
}

absl::Status TuneStore::LoadQuarantineInfo() {
  absl::StatusOr<int64_t> count =
      db_.QueryInt("SELECT COUNT(*) FROM quarantine");
  if (!count.ok()) return count.status();
  absl::StatusOr<Statement> st = db_.Prepare(
      "SELECT key_id FROM (SELECT rowid, key_id FROM quarantine ORDER BY rowid "
      "DESC LIMIT ?1) ORDER BY rowid");
  if (!st.ok()) return st.status();
  st->BindInt(1, QuarantineInfo::kShown);
  absl::MutexLock lock(&quarantine_mu_);
  quarantine_.count = static_cast<uint64_t>(*count);
  while (true) {
    absl::StatusOr<bool> row = st->Step();
    if (!row.ok()) return row.status();
    if (!*row) break;
    quarantine_.recent_key_ids.push_back(st->ColumnText(0));
  }
  return absl::OkStatus();
}

QuarantineInfo TuneStore::quarantined() const {
  absl::MutexLock lock(&quarantine_mu_);
  return quarantine_;
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

absl::Status TuneStore::StartClaimEpoch() { return NewClaimEpochLocked(); }

absl::Status TuneStore::NewClaimEpochLocked() {
  absl::StatusOr<int64_t> stored = db_.QueryInt(
      "SELECT COALESCE((SELECT value FROM meta WHERE name = 'claim_epoch'), "
      "0)");
  if (!stored.ok()) return stored.status();
  const uint64_t epoch = std::max<uint64_t>(
      {static_cast<uint64_t>(*stored) + 1,
       static_cast<uint64_t>(absl::ToUnixMillis(absl::Now())),
       claim_epoch_ + 1});
  absl::StatusOr<Statement> st = db_.Prepare(
      "INSERT OR REPLACE INTO meta (name, value) VALUES ('claim_epoch', ?1)");
  if (!st.ok()) return st.status();
  st->BindInt(1, static_cast<int64_t>(epoch));
  if (auto s = st->Run(); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cannot store the claim-id "
                                               "epoch: ",
                                               s.message()));
  }
  claim_epoch_ = epoch;
  // Sequence 0 is never handed out: claim id 0 means "none" on the wire.
  next_claim_sequence_ = 1;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> TuneStore::ReserveClaimIds(uint64_t count) {
  constexpr uint64_t kSequences = uint64_t{1} << kClaimSequenceBits;
  if (count == 0 || count >= kSequences) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot reserve ", count, " claim ids at once"));
  }
  absl::MutexLock lock(&mu_);
  if (next_claim_sequence_ + count > kSequences) {
    if (auto s = NewClaimEpochLocked(); !s.ok()) return s;
  }
  const uint64_t first =
      (claim_epoch_ << kClaimSequenceBits) | next_claim_sequence_;
  next_claim_sequence_ += count;
  return first;
}

absl::StatusOr<uint64_t> TuneStore::Backup(const std::string& path) {
  // Created here, new, not through a symlink (O_EXCL refuses any existing
  // name, dangling links included): VACUUM INTO accepts an empty file.
  const int fd = open(
      path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, " exists: choose a new file name for the backup"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  close(fd);
  auto fail = [&](const absl::Status& s) {
    unlink(path.c_str());
    return absl::Status(
        s.code(), absl::StrCat("backup to ", path,
                               " failed (nothing was kept): ", s.message()));
  };
  int64_t expected = 0;
  {
    absl::MutexLock lock(&mu_);
    absl::StatusOr<int64_t> count =
        db_.QueryInt("SELECT COUNT(*) FROM entries");
    if (!count.ok()) return fail(count.status());
    expected = *count;
    absl::StatusOr<Statement> st = db_.Prepare("VACUUM INTO ?1");
    if (!st.ok()) return fail(st.status());
    st->BindText(1, path);
    if (auto s = st->Run(); !s.ok()) return fail(s);
  }
  // Verified as a reader would use it.
  {
    absl::StatusOr<Connection> copy = Connection::Open(path);
    if (!copy.ok()) return fail(copy.status());
    absl::StatusOr<Statement> check = copy->Prepare("PRAGMA quick_check");
    if (!check.ok()) return fail(check.status());
    absl::StatusOr<bool> row = check->Step();
    if (!row.ok()) return fail(row.status());
    if (!*row || check->ColumnText(0) != "ok") {
      return fail(absl::DataLossError("the copy does not pass quick_check"));
    }
    absl::StatusOr<int64_t> count =
        copy->QueryInt("SELECT COUNT(*) FROM entries");
    if (!count.ok()) return fail(count.status());
    if (*count != expected) {
      return fail(absl::DataLossError(absl::StrCat(
          "the copy holds ", *count, " entries, the database ", expected)));
    }
  }
  const int sync_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (sync_fd < 0 || fsync(sync_fd) != 0) {
    if (sync_fd >= 0) close(sync_fd);
    return fail(
        absl::InternalError(absl::StrCat("fsync: ", std::strerror(errno))));
  }
  close(sync_fd);
  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) return fail(absl::InternalError(ec.message()));
  return static_cast<uint64_t>(size);
}

}  // namespace gputune::storage
