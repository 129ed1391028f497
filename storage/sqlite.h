// A thin RAII layer over the SQLite C API: a connection and prepared
// statements, with errors as absl::Status.
//
//   absl::StatusOr<Connection> db = Connection::Open(path);
//   absl::StatusOr<Statement> st = db->Prepare("SELECT entry FROM entries "
//                                              "WHERE key_id = ?1");
//   st->BindText(1, id);
//   while (true) { absl::StatusOr<bool> row = st->Step(); ... }
//
// Not thread-safe: one thread at a time per Connection (TuneStore serialises).
#ifndef GPUTUNE_STORAGE_SQLITE_H_
#define GPUTUNE_STORAGE_SQLITE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gputune::storage {

class Statement {
 public:
  Statement(Statement&&) noexcept;
  Statement& operator=(Statement&&) noexcept;
  ~Statement();

  // Bind parameter `index` (1-based). Values are copied.
  void BindText(int index, absl::string_view value);
  void BindBlob(int index, absl::string_view value);
  void BindInt(int index, int64_t value);

  // Advances: true when a row is ready, false when done. An error carries the
  // SQLite message; corruption maps to DATA_LOSS.
  absl::StatusOr<bool> Step();
  // Runs to completion, ignoring rows.
  absl::Status Run();
  // Resets for re-use with new bindings.
  void Reset();

  int64_t ColumnInt(int col) const;
  std::string ColumnText(int col) const;
  std::string ColumnBlob(int col) const;

 private:
  friend class Connection;
  Statement(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  sqlite3* db_;
  sqlite3_stmt* stmt_;
};

class Connection {
 public:
  // Opens (creating if needed) the database file.
  static absl::StatusOr<Connection> Open(const std::string& path);
  // A closed connection (for moving into).
  Connection() : db_(nullptr) {}
  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  ~Connection();

  absl::StatusOr<Statement> Prepare(absl::string_view sql);
  // Runs one or more statements without results.
  absl::Status Exec(absl::string_view sql);
  // Runs a statement that yields one integer (e.g. PRAGMA user_version).
  absl::StatusOr<int64_t> QueryInt(absl::string_view sql);
  int64_t Changes() const;

 private:
  explicit Connection(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

// Maps an SQLite result code to a status: corruption and "not a database" to
// DATA_LOSS, busy/locked to UNAVAILABLE, a full disk (SQLITE_FULL, or an I/O
// error with ENOSPC, EDQUOT or EFBIG) to RESOURCE_EXHAUSTED, the rest to
// INTERNAL.
absl::Status SqliteError(int code, absl::string_view what, sqlite3* db);

}  // namespace gputune::storage

#endif  // GPUTUNE_STORAGE_SQLITE_H_
