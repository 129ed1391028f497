#include "storage/sqlite.h"

#include <sqlite3.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gputune::storage {

namespace {

// Whether errno value `error` means the disk (or a quota, or a file-size
// limit) has no room.
bool NoRoom(int error) {
  return error == ENOSPC || error == EDQUOT || error == EFBIG;
}

// The errno of the I/O error behind a SQLITE_IOERR on `db`.
// sqlite3_system_errno reports errno as it was when SQLite finished the
// statement, which its clean-up after a failed write may have changed (a
// COMMIT that failed for EFBIG reported 0); the files themselves keep the
// errno of their last failed call (SQLITE_FCNTL_LAST_ERRNO), so the
// database's and its WAL's (or journal's) are asked too.
int IoErrno(sqlite3* db) {
  if (db == nullptr) return 0;
  const int error = sqlite3_system_errno(db);
  if (NoRoom(error)) return error;
  int last = 0;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_LAST_ERRNO, &last) ==
          SQLITE_OK &&
      NoRoom(last)) {
    return last;
  }
  sqlite3_file* journal = nullptr;
  if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER,
                           &journal) == SQLITE_OK &&
      journal != nullptr && journal->pMethods != nullptr &&
      journal->pMethods->xFileControl(journal, SQLITE_FCNTL_LAST_ERRNO,
                                      &last) == SQLITE_OK &&
      NoRoom(last)) {
    return last;
  }
  return error;
}

}  // namespace

absl::Status SqliteError(int code, absl::string_view what, sqlite3* db) {
  const std::string msg =
      absl::StrCat(what, ": ", db ? sqlite3_errmsg(db) : sqlite3_errstr(code));
  switch (code & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(msg);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::UnavailableError(msg);
    case SQLITE_FULL:
      return absl::ResourceExhaustedError(msg);
    case SQLITE_IOERR: {
      // A write refused for space (ENOSPC, a quota, a file-size limit) is a
      // full disk, not a fault of the daemon.
      const int error = IoErrno(db);
      if (NoRoom(error)) {
        return absl::ResourceExhaustedError(
            absl::StrCat(msg, " (", std::strerror(error),
                         "): free disk space for the database"));
      }
      return absl::InternalError(msg);
    }
    case SQLITE_CANTOPEN:
    case SQLITE_PERM:
    case SQLITE_READONLY:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

Statement::Statement(Statement&& o) noexcept
    : db_(o.db_), stmt_(std::exchange(o.stmt_, nullptr)) {}
Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    sqlite3_finalize(stmt_);
    db_ = o.db_;
    stmt_ = std::exchange(o.stmt_, nullptr);
  }
  return *this;
}
Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::BindText(int index, absl::string_view value) {
  sqlite3_bind_text(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
}
void Statement::BindBlob(int index, absl::string_view value) {
  sqlite3_bind_blob(stmt_, index, value.data(), static_cast<int>(value.size()),
                    SQLITE_TRANSIENT);
}
void Statement::BindInt(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
}

absl::StatusOr<bool> Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  return SqliteError(rc, sqlite3_sql(stmt_), db_);
}

absl::Status Statement::Run() {
  while (true) {
    absl::StatusOr<bool> row = Step();
    if (!row.ok()) {
      Reset();
      return row.status();
    }
    if (!*row) break;
  }
  Reset();
  return absl::OkStatus();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int64_t Statement::ColumnInt(int col) const {
  return sqlite3_column_int64(stmt_, col);
}
std::string Statement::ColumnText(int col) const {
  const auto* p = sqlite3_column_text(stmt_, col);
  return p ? std::string(reinterpret_cast<const char*>(p),
                         sqlite3_column_bytes(stmt_, col))
           : std::string();
}
std::string Statement::ColumnBlob(int col) const {
  const void* p = sqlite3_column_blob(stmt_, col);
  return p ? std::string(static_cast<const char*>(p),
                         sqlite3_column_bytes(stmt_, col))
           : std::string();
}

absl::StatusOr<Connection> Connection::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    absl::Status s = SqliteError(rc, absl::StrCat("open ", path), db);
    sqlite3_close(db);
    return s;
  }
  sqlite3_extended_result_codes(db, 1);
  return Connection(db);
}

Connection::Connection(Connection&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)) {}
Connection& Connection::operator=(Connection&& o) noexcept {
  if (this != &o) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(o.db_, nullptr);
  }
  return *this;
}
Connection::~Connection() { sqlite3_close_v2(db_); }

absl::StatusOr<Statement> Connection::Prepare(absl::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  const int rc =
      sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                         SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    return SqliteError(rc, absl::StrCat("prepare '", sql, "'"), db_);
  }
  return Statement(db_, stmt);
}

absl::Status Connection::Exec(absl::string_view sql) {
  char* err = nullptr;
  const std::string copy(sql);
  const int rc = sqlite3_exec(db_, copy.c_str(), nullptr, nullptr, &err);
  sqlite3_free(err);
  if (rc != SQLITE_OK) return SqliteError(rc, copy, db_);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Connection::QueryInt(absl::string_view sql) {
  absl::StatusOr<Statement> st = Prepare(sql);
  if (!st.ok()) return st.status();
  absl::StatusOr<bool> row = st->Step();
  if (!row.ok()) return row.status();
  if (!*row) return absl::InternalError(absl::StrCat(sql, ": no row"));
  return st->ColumnInt(0);
}

int64_t Connection::Changes() const { return sqlite3_changes64(db_); }

}  // namespace gputune::storage
