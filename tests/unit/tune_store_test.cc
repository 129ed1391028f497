// The SQLite tune cache: schema, migrations, reopen, corrupt-file recovery.
#include "storage/tune_store.h"

#include <sqlite3.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "proto/key_format.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::storage {
namespace {

using gputune::testing::DenseKey;
namespace fs = std::filesystem;

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/gputune-store-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string db() const { return path + "/t.db"; }
  std::string path;
};

std::unique_ptr<TuneStore> OpenOrDie(const std::string& path,
                                     OpenReport* report = nullptr) {
  OpenReport local;
  auto store = TuneStore::Open({path, true}, report ? report : &local);
  REQUIRE(store.ok());
  return std::move(*store);
}

v1::Entry MakeEntry(uint32_t m, const std::string& kernel = "k") {
  v1::Entry e;
  *e.mutable_key() = DenseKey(m);
  e.mutable_execution()->set_kernel(kernel);
  (*e.mutable_execution()->mutable_params())["algo_id"] = 66;
  auto* meas = e.add_measurements();
  *meas->mutable_execution() = e.execution();
  meas->set_samples(10);
  e.mutable_fingerprint()->set_device_name("dev");
  return e;
}

std::string Id(uint32_t m) { return KeyId(DenseKey(m)); }

}  // namespace

TEST_CASE("a new database is created at the current schema version") {
  TempDir dir;
  OpenReport report;
  auto store = OpenOrDie(dir.db(), &report);
  CHECK(report.schema_version_found == 0);
  CHECK(report.quarantined_to.empty());
  CHECK(*store->Count() == 0);
  store.reset();
  OpenReport again;
  OpenOrDie(dir.db(), &again);
  CHECK(again.schema_version_found == TuneStore::kSchemaVersion);
}

TEST_CASE("entries survive a reopen byte for byte") {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.db());
    REQUIRE(store->Put(MakeEntry(1)).ok());
    REQUIRE(store->Put(MakeEntry(2)).ok());
    REQUIRE(store->Put(MakeEntry(1, "replaced")).ok());
  }
  auto store = OpenOrDie(dir.db());
  CHECK(*store->Count() == 2);
  auto got = store->Get(Id(1));
  REQUIRE(got.ok());
  REQUIRE(got->has_value());
  CHECK((*got)->SerializeAsString() ==
        MakeEntry(1, "replaced").SerializeAsString());
  std::vector<std::string> ids;
  REQUIRE(store
              ->ForEachSummary([&](std::string id, std::string summary,
                                   std::string candidate_set, std::string) {
                v1::Entry parsed;
                CHECK(parsed.ParseFromString(summary));
                CHECK(parsed.measurements_size() == 0);
                CHECK(candidate_set == "cs1");
                ids.push_back(std::move(id));
              })
              .ok());
  CHECK(ids == std::vector<std::string>{Id(1), Id(2)});
}

TEST_CASE("List pages in key order and filters by op, role and fingerprint") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  for (uint32_t m = 1; m <= 5; ++m) REQUIRE(store->Put(MakeEntry(m)).ok());
  EntryQuery all;
  auto page1 = store->List(all, "", 2);
  REQUIRE(page1.ok());
  REQUIRE(page1->entries.size() == 2);
  CHECK(page1->rows == 2);
  CHECK(page1->last_key_id == KeyId(page1->entries.back().key()));
  auto page2 = store->List(all, page1->last_key_id, 10);
  CHECK(page2->entries.size() == 3);
  EntryQuery other_role;
  other_role.role = "nope";
  CHECK(store->List(other_role, "", 10)->entries.empty());
  EntryQuery stale;
  stale.fingerprint = "not-the-digest";
  stale.fingerprint_match = false;
  CHECK(store->List(stale, "", 10)->entries.size() == 5);
}

TEST_CASE("Delete and DeleteMatching return what they removed") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  for (uint32_t m = 1; m <= 3; ++m) REQUIRE(store->Put(MakeEntry(m)).ok());
  auto deleted = store->Delete({Id(1), Id(9)});
  REQUIRE(deleted.ok());
  CHECK(*deleted == std::vector<std::string>{Id(1)});
  EntryQuery q;
  q.op = "dense_bf16";
  CHECK(store->DeleteMatching(q)->size() == 2);
  CHECK(*store->Count() == 0);
}

TEST_CASE("PutAll is all or nothing") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  REQUIRE(store->PutAll({MakeEntry(1), MakeEntry(2)}).ok());
  CHECK(*store->Count() == 2);
}

TEST_CASE("claim id reservations never overlap, also after reopening") {
  TempDir dir;
  uint64_t a, b, c;
  {
    auto store = OpenOrDie(dir.db());
    a = *store->ReserveClaimIds(100);
    b = *store->ReserveClaimIds(100);
  }
  auto store = OpenOrDie(dir.db());
  c = *store->ReserveClaimIds(100);
  CHECK(b >= a + 100);
  CHECK(c >= b + 100);
}

TEST_CASE("claim ids increase across a reopen that lost the WAL") {
  TempDir dir;
  uint64_t before = 0;
  {
    auto store = OpenOrDie(dir.db());
    before = *store->ReserveClaimIds(1024);
    fs::remove(dir.db() + "-wal");  // as if the tail never reached the disk
    fs::remove(dir.db() + "-shm");
  }
  auto store = OpenOrDie(dir.db());
  CHECK(*store->ReserveClaimIds(1024) > before);
}

TEST_CASE("a process that runs out of sequence numbers takes a new epoch") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  constexpr uint64_t kBlock = uint64_t{1}
                              << (TuneStore::kClaimSequenceBits - 1);
  const uint64_t a = *store->ReserveClaimIds(kBlock);
  const uint64_t b = *store->ReserveClaimIds(kBlock);  // does not fit: new
  CHECK(b >= a + kBlock);
  CHECK((a >> TuneStore::kClaimSequenceBits) <
        (b >> TuneStore::kClaimSequenceBits));
  CHECK(store->ReserveClaimIds(0).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a damaged row is moved to quarantine by Get, List and the load") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  for (uint32_t m = 1; m <= 4; ++m) REQUIRE(store->Put(MakeEntry(m)).ok());
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.db().c_str(), &db) == SQLITE_OK);
  const std::string sql =
      "UPDATE entries SET entry = X'0aff' WHERE key_id IN ('" + Id(2) + "', '" +
      Id(3) +
      "'); UPDATE entries SET summary = X'0aff' WHERE "
      "key_id = '" +
      Id(4) + "'";
  REQUIRE(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr) ==
          SQLITE_OK);
  sqlite3_close(db);

  bool quarantined = false;
  CHECK_FALSE(store->Get(Id(2), &quarantined)->has_value());
  CHECK(quarantined);
  absl::StatusOr<ListPage> page = store->List(EntryQuery(), "", 10);
  REQUIRE(page.ok());
  CHECK(page->entries.size() == 2);  // 1, and 4 (its entry is intact)
  CHECK(page->rows == 3);
  CHECK(page->quarantined == std::vector<std::string>{Id(3)});
  std::vector<std::string> loaded;
  REQUIRE(store
              ->ForEachSummary([&](std::string id, std::string, std::string,
                                   std::string) { loaded.push_back(id); })
              .ok());
  CHECK(loaded == std::vector<std::string>{Id(1)});
  const QuarantineInfo info = store->quarantined();
  CHECK(info.count == 3);
  CHECK(info.recent_key_ids == std::vector<std::string>{Id(2), Id(3), Id(4)});
  CHECK(*store->Count() == 1);
  // Kept across a reopen; the key can be stored again.
  store.reset();
  store = OpenOrDie(dir.db());
  CHECK(store->quarantined().count == 3);
  REQUIRE(store->Put(MakeEntry(2)).ok());
  CHECK(store->Get(Id(2))->has_value());
}

TEST_CASE("a database with tables but no schema version is quarantined") {
  TempDir dir;
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.db().c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "CREATE TABLE entries (x INTEGER)", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  OpenReport report;
  auto store = OpenOrDie(dir.db(), &report);
  CHECK_FALSE(report.quarantined_to.empty());
  CHECK(report.quarantine_reason.find("not a gputune database") !=
        std::string::npos);
  REQUIRE(store->Put(MakeEntry(1)).ok());
}

TEST_CASE("the database file is created 0640 whatever the umask") {
  TempDir dir;
  const mode_t old = umask(0);
  OpenOrDie(dir.db());
  umask(old);
  CHECK(
      (fs::status(dir.db()).permissions() & fs::perms::all) ==
      (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read));
}

TEST_CASE("a file that is not a database is quarantined with -wal and -shm") {
  TempDir dir;
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::ofstream(dir.db() + suffix) << "this is not an SQLite database, at "
                                        "all, not even close to one....";
  }
  OpenReport report;
  auto store = OpenOrDie(dir.db(), &report);
  REQUIRE_FALSE(report.quarantined_to.empty());
  CHECK(fs::exists(report.quarantined_to));
  CHECK(fs::exists(report.quarantined_to + "-wal"));
  CHECK(fs::exists(report.quarantined_to + "-shm"));
  CHECK(*store->Count() == 0);
  REQUIRE(store->Put(MakeEntry(1)).ok());
}

TEST_CASE("a database with a corrupted page is quarantined") {
  TempDir dir;
  {
    auto store = OpenOrDie(dir.db());
    for (uint32_t m = 1; m <= 200; ++m) REQUIRE(store->Put(MakeEntry(m)).ok());
  }
  {
    // Checkpoint the WAL into the main file, then scribble over page 2.
    sqlite3* db = nullptr;
    sqlite3_open(dir.db().c_str(), &db);
    sqlite3_exec(db, "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr,
                 nullptr);
    sqlite3_close(db);
    std::fstream f(dir.db(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(4096 + 16);
    const std::string junk(2000, '\x5a');
    f.write(junk.data(), junk.size());
  }
  OpenReport report;
  auto store = OpenOrDie(dir.db(), &report);
  CHECK_FALSE(report.quarantined_to.empty());
  CHECK(*store->Count() == 0);
}

TEST_CASE("tables that do not match their schema version are quarantined") {
  TempDir dir;
  {
    // Version 1 by its number, but without the summary column.
    sqlite3* db = nullptr;
    sqlite3_open(dir.db().c_str(), &db);
    sqlite3_exec(db,
                 "CREATE TABLE entries (key_id TEXT PRIMARY KEY, op TEXT, "
                 "phase INTEGER, role TEXT, fingerprint TEXT, candidate_set "
                 "TEXT, updated_at INTEGER, entry BLOB);"
                 "CREATE TABLE meta (name TEXT PRIMARY KEY, value INTEGER);"
                 "PRAGMA user_version = 1;",
                 nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  OpenReport report;
  auto store = OpenOrDie(dir.db(), &report);
  REQUIRE_FALSE(report.quarantined_to.empty());
  CHECK(fs::exists(report.quarantined_to));
  CHECK(report.quarantine_reason.find("summary") != std::string::npos);
  CHECK(report.schema_version_found == 0);  // the fresh file's
  REQUIRE(store->Put(MakeEntry(1)).ok());
}

TEST_CASE("a schema newer than the binary knows is refused untouched") {
  TempDir dir;
  OpenOrDie(dir.db());
  {
    sqlite3* db = nullptr;
    sqlite3_open(dir.db().c_str(), &db);
    sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr);
    sqlite3_close(db);
  }
  OpenReport report;
  auto store = TuneStore::Open({dir.db(), true}, &report);
  REQUIRE_FALSE(store.ok());
  CHECK(store.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(store.status().message()).find("newer") !=
        std::string::npos);
  CHECK(report.quarantined_to.empty());
  CHECK(fs::exists(dir.db()));
}

TEST_CASE("Backup writes a consistent copy and refuses to overwrite") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  REQUIRE(store->Put(MakeEntry(1)).ok());
  auto bytes = store->Backup(dir.path + "/backup.db");
  REQUIRE(bytes.ok());
  CHECK(*bytes > 0);
  CHECK(store->Backup(dir.path + "/backup.db").status().code() ==
        absl::StatusCode::kAlreadyExists);
  auto copy = OpenOrDie(dir.path + "/backup.db");
  CHECK(*copy->Count() == 1);
}

TEST_CASE("a side write shares its entries' transaction: both or neither") {
  TempDir dir;
  auto store = OpenOrDie(dir.db());
  REQUIRE(store
              ->Transact([](Connection& db) {
                return db.Exec("CREATE TABLE side (v INTEGER)");
              })
              .ok());
  auto side_rows = [&] {
    int64_t n = -1;
    REQUIRE(store
                ->Transact([&](Connection& db) {
                  absl::StatusOr<int64_t> c =
                      db.QueryInt("SELECT COUNT(*) FROM side");
                  if (c.ok()) n = *c;
                  return c.status();
                })
                .ok());
    return n;
  };
  REQUIRE(store
              ->PutAllWith({MakeEntry(1)},
                           [](Connection& db) {
                             return db.Exec("INSERT INTO side VALUES (1)");
                           })
              .ok());
  CHECK(*store->Count() == 1);
  CHECK(side_rows() == 1);

  const absl::Status failed =
      store->PutAllWith({MakeEntry(2)}, [](Connection& db) {
        if (auto s = db.Exec("INSERT INTO side VALUES (2)"); !s.ok()) return s;
        return absl::InternalError("the side write failed");
      });
  CHECK(failed.code() == absl::StatusCode::kInternal);
  CHECK(*store->Count() == 1);  // entry 2 rolled back with it
  CHECK_FALSE(store->Get(Id(2))->has_value());
  CHECK(side_rows() == 1);
}

}  // namespace gputune::storage
