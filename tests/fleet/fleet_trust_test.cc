// A fleet that trusts nothing a row says about itself (issue 29, items 5-8):
// real gputuned processes and a real PostgreSQL, with rows written straight
// into fleet_entries as a broken or compromised host would.
#include <libpq-fe.h>
#include <sqlite3.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "client/gputunectl/commands.h"
#include "grpcpp/client_context.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "tests/fleet/fleet_test_support.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/eventually.h"
#include "tests/support/metrics_text.h"

namespace gputune {
namespace {

using testing::Ctx;
using testing::DaemonProcess;
using testing::DenseKey;
using testing::PostgresServer;

// Generous: the daemons poll the feed every 200 ms.
bool Soon(const std::function<bool()>& cond) {
  return testing::Eventually(cond, std::chrono::seconds(20));
}

DaemonProcess FleetDaemon(const std::string& conninfo,
                          const std::string& lease = "1s") {
  return DaemonProcess({"--backend=host", "--fleet=" + conninfo,
                        "--fleet_lease_ttl=" + lease,
                        "--fleet_poll_interval=200ms",
                        "--autotune_log=disabled", "--log_level=debug"});
}

v1::FleetStatus Fleet(const DaemonProcess& d) {
  v1::GetStatusResponse resp;
  REQUIRE(d.Stub()->GetStatus(Ctx().get(), {}, &resp).ok());
  return resp.fleet();
}

v1::Entry Served(const DaemonProcess& d, const v1::Key& key) {
  v1::GetEntryRequest req;
  *req.mutable_key() = key;
  v1::GetEntryResponse resp;
  if (!d.Stub()->GetEntry(Ctx().get(), req, &resp).ok()) return {};
  return resp.entry();
}

v1::KeyState State(const DaemonProcess& d, const v1::Key& key) {
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse resp;
  REQUIRE(d.Stub()->Lookup(Ctx().get(), req, &resp).ok());
  return resp.status().state();
}

// Whether `d` serves `kernel` for `key`.
bool Serves(const DaemonProcess& d, const v1::Key& key,
            const std::string& kernel) {
  return State(d, key) == v1::KEY_STATE_HIT &&
         Served(d, key).execution().kernel() == kernel;
}

// A client's Claim and Record of `key` with `kernel` chosen.
void Record(const DaemonProcess& d, const v1::Key& key,
            const std::string& kernel) {
  auto stub = d.Stub();
  v1::ClaimRequest claim;
  *claim.mutable_key() = key;
  claim.set_holder("trust-test");
  v1::ClaimResponse granted;
  REQUIRE(stub->Claim(Ctx().get(), claim, &granted).ok());
  REQUIRE(granted.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  v1::RecordRequest req;
  req.set_claim_id(granted.claim().claim_id());
  req.mutable_execution()->set_kernel(kernel);
  auto* m = req.add_measurements();
  *m->mutable_execution() = req.execution();
  m->set_validation(v1::VALIDATION_PASSED);
  *m->mutable_median() = ToProto(absl::Microseconds(10));
  m->set_samples(5);
  m->set_chosen(true);
  v1::RecordResponse resp;
  const grpc::Status s = stub->Record(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
}

// The value of a gputune_fleet_* series of `d` ("" labels: none but the
// device's); -1 when it has none.
double Metric(const DaemonProcess& d, const std::string& name,
              const std::string& labels = "") {
  v1::GetMetricsResponse resp;
  REQUIRE(d.AdminStub()->GetMetrics(Ctx().get(), {}, &resp).ok());
  const std::map<std::string, double> all = testing::Samples(resp.text());
  auto it = all.find(absl::StrCat(name, "{device=\"0\"",
                                  labels.empty() ? "" : ",", labels, "}"));
  return it == all.end() ? -1 : it->second;
}

double Skipped(const DaemonProcess& d, const std::string& reason) {
  return Metric(d, "gputune_fleet_feed_skipped_total",
                absl::StrCat("reason=\"", reason, "\""));
}

// `bytes` as a bytea literal.
std::string Bytea(const std::string& bytes) {
  return absl::StrCat("'\\x", absl::BytesToHexString(bytes), "'::bytea");
}

// A row for fleet_entries as a host would write it by hand.
std::string InsertRow(const std::string& fingerprint, const std::string& key_id,
                      const std::string& candidate_set,
                      const std::string& entry_sql, uint64_t seq = 0,
                      bool deleted = false) {
  return absl::StrCat(
      "INSERT INTO fleet_entries (fingerprint, key_id, candidate_set, seq, "
      "fence, host, gpu, instance, entry, deleted) VALUES ('",
      fingerprint, "', '", key_id, "', '", candidate_set, "', ", seq,
      ", 0, 'evil-host', 'evil-gpu', 'evil/1', ", entry_sql, ", ",
      deleted ? "true" : "false", ")");
}

// Peak resident set (VmHWM) of `pid` in KiB.
int64_t PeakKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  }
  return -1;
}

// A PostgreSQL server, a fleet database and two daemons on it (as the
// superuser), with one entry recorded on `a` and adopted by `b`.
struct Fleet2 {
  explicit Fleet2(const std::string& name)
      : db(name),
        conninfo(pg.CreateDatabase(name)),
        a(FleetDaemon(conninfo)),
        b(FleetDaemon(conninfo)) {
    REQUIRE(Soon([&] { return Fleet(a).connected() && Fleet(b).connected(); }));
    Record(a, first, "k.first");
    REQUIRE(Soon([&] { return Serves(b, first, "k.first"); }));
    fingerprint =
        pg.Query(db, "SELECT fingerprint FROM fleet_entries LIMIT 1")[0][0];
  }
  std::string Sql(const std::string& sql) const {
    auto rows = pg.Query(db, sql);
    return rows.empty() || rows[0].empty() ? "" : rows[0][0];
  }
  PostgresServer pg;
  std::string db;
  std::string conninfo;
  DaemonProcess a;
  DaemonProcess b;
  const v1::Key first = DenseKey(1, 64, 64);
  std::string fingerprint;
};

}  // namespace

TEST_CASE(
    "a feed row with a forged sequence number is skipped and counted, and "
    "moves no follower past the rows after it") {
  GPUTUNE_REQUIRE_POSTGRES();
  Fleet2 f("forged_seq");
  // 9e18: far beyond anything the fleet's sequence handed out; its entry
  // is not an Entry at all.
  f.pg.Query(f.db, InsertRow(f.fingerprint, "forged/key", "cs1",
                             Bytea("\x01\xff\xff"), 9000000000000000000ull));
  // Read by the follower before the next Record is.
  const uint64_t forged = std::stoull(
      f.Sql("SELECT seq FROM fleet_entries WHERE key_id = 'forged/key'"));
  REQUIRE(Soon([&] { return Fleet(f.b).feed_seq() >= forged; }));
  const v1::Key second = DenseKey(2, 64, 64);
  Record(f.a, second, "k.second");
  REQUIRE(Soon([&] { return Serves(f.b, second, "k.second"); }));
  CHECK(Fleet(f.b).feed_seq() < 1000);
  REQUIRE(Soon([&] { return Skipped(f.b, "unparseable") == 1; }));
  CHECK(Fleet(f.b).feed_unparseable() == 1);
  // Read once, counted once, however often the feed is polled.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  CHECK(Skipped(f.b, "unparseable") == 1);
  CHECK(Skipped(f.b, "mismatch") == 0);
  std::ostringstream out, err;
  REQUIRE(ctl::Main({"--endpoint=" + f.b.endpoint(), "status"}, out, err) == 0);
  CHECK(out.str().find("; skipped 1 unparseable, 0 not matching their row, 0 "
                       "oversized") != std::string::npos);
}

TEST_CASE(
    "a follower whose position is beyond the fleet's sequence follows the "
    "feed from the start again") {
  GPUTUNE_REQUIRE_POSTGRES();
  Fleet2 f("beyond");
  // As a forged row's seq left it before schema version 2.
  REQUIRE(f.b.Terminate() == 0);
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(f.b.db_path().c_str(), &db) == SQLITE_OK);
  CHECK(sqlite3_exec(db,
                     "UPDATE fleet_state SET value = '9000000000000000000' "
                     "WHERE name = 'feed_seq'",
                     nullptr, nullptr, nullptr) == SQLITE_OK);
  CHECK(sqlite3_changes(db) == 1);
  sqlite3_close(db);
  f.b.Start();
  const v1::Key second = DenseKey(2, 64, 64);
  Record(f.a, second, "k.second");
  REQUIRE(Soon([&] { return Serves(f.b, second, "k.second"); }));
  CHECK(Fleet(f.b).feed_seq() < 1000);
  CHECK(f.b.Log().find("beyond the fleet's sequence") != std::string::npos);
  CHECK(Serves(f.b, f.first, "k.first"));
}

TEST_CASE(
    "a row whose columns disagree with its entry is skipped and counted, and "
    "PostgreSQL keeps one live row per key and fingerprint") {
  GPUTUNE_REQUIRE_POSTGRES();
  Fleet2 f("mismatch");
  // The key's real entry under another candidate set's column: a second
  // live row for the key is refused.
  v1::Entry planted = Served(f.a, f.first);
  planted.set_source(v1::SOURCE_CLIENT_MEASURED);
  planted.clear_fleet();
  planted.mutable_execution()->set_kernel("k.planted");
  const std::string key_id = KeyId(f.first);
  CHECK_THROWS(f.pg.Query(f.db, InsertRow(f.fingerprint, key_id, "evil-cs",
                                          Bytea(planted.SerializeAsString()))));
  CHECK(f.Sql("SELECT count(*) FROM fleet_entries WHERE NOT deleted AND "
              "key_id = '" +
              key_id + "'") == "1");
  // A key the fleet does not have yet, its entry for cs1 in a row that says
  // evil-cs: not adopted.
  const v1::Key second = DenseKey(2, 64, 64);
  *planted.mutable_key() = second;
  f.pg.Query(f.db, InsertRow(f.fingerprint, KeyId(second), "evil-cs",
                             Bytea(planted.SerializeAsString())));
  REQUIRE(Soon([&] { return Skipped(f.b, "mismatch") == 1; }));
  CHECK(Fleet(f.b).feed_mismatched() == 1);
  CHECK(State(f.b, second) == v1::KEY_STATE_MISS);
  CHECK(Serves(f.b, f.first, "k.first"));
  CHECK(Serves(f.a, f.first, "k.first"));
}

TEST_CASE(
    "an oversized row is refused by the schema, and one already in the table "
    "is skipped before its bytes are fetched, and counted") {
  GPUTUNE_REQUIRE_POSTGRES();
  Fleet2 f("oversized");
  const std::string two_mib = "decode(repeat('ab', 2 << 20), 'hex')";
  CHECK_THROWS(
      f.pg.Query(f.db, InsertRow(f.fingerprint, "big/one", "cs1", two_mib)));
  // A row from before the constraint (it is NOT VALID for old rows): 24 MiB.
  f.pg.Query(f.db,
             "ALTER TABLE fleet_entries DROP CONSTRAINT fleet_entries_size");
  const int64_t peak_before = PeakKiB(f.b.pid());
  f.pg.Query(f.db, InsertRow(f.fingerprint, "big/two", "cs1",
                             "decode(repeat('ab', 24 << 20), 'hex')"));
  const uint64_t big_seq =
      std::stoull(f.Sql("SELECT seq FROM fleet_entries WHERE key_id = "
                        "'big/two'"));
  REQUIRE(Soon([&] { return Fleet(f.b).feed_seq() >= big_seq; }));
  // Fetching it would have cost at least its 48 MiB of hex text.
  const int64_t grown = PeakKiB(f.b.pid()) - peak_before;
  INFO("peak RSS grew by " << grown << " KiB");
  CHECK(grown < 16 * 1024);
  CHECK(Skipped(f.b, "oversized") == 1);
  CHECK(Fleet(f.b).feed_oversized() == 1);
  const v1::Key second = DenseKey(2, 64, 64);
  Record(f.a, second, "k.second");
  REQUIRE(Soon([&] { return Serves(f.b, second, "k.second"); }));
}

namespace {

// Runs `sql` on a connection of its own (`conninfo`: another role); the
// server's message when it fails, else "" and the rows it changed in
// *changed.
std::string RunAs(const std::string& conninfo, const std::string& sql,
                  long* changed = nullptr) {
  PGconn* conn = PQconnectdb(conninfo.c_str());
  std::string error;
  if (PQstatus(conn) != CONNECTION_OK) {
    error = PQerrorMessage(conn);
  } else {
    PGresult* r = PQexec(conn, sql.c_str());
    const ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      error = PQresultErrorMessage(r);
    } else if (changed != nullptr) {
      *changed = std::atol(PQcmdTuples(r));
    }
    PQclear(r);
  }
  PQfinish(conn);
  return error;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

// A fleet database made by its owner, deploy/fleet-roles.sql run in it
// (docs/operations.md, "Roles and row-level security"), and the login roles
// host_a and host_b (gputune_host) and ops (gputune_operator), each with the
// password "pw-<role>".
struct RolesFleet {
  explicit RolesFleet(const std::string& name)
      : db(name), owner(pg.CreateDatabase(name)) {
    {
      DaemonProcess maker(FleetDaemon(owner));  // the owner makes the schema
      REQUIRE(Soon([&] { return Fleet(maker).connected(); }));
    }
    const std::string setup = ReadText(GPUTUNE_FLEET_ROLES_SQL);
    REQUIRE_FALSE(setup.empty());
    pg.Query(db, setup);
    pg.Query(
        db,
        "CREATE ROLE host_a LOGIN PASSWORD 'pw-host_a' IN ROLE "
        "gputune_host;"
        "CREATE ROLE host_b LOGIN PASSWORD 'pw-host_b' IN ROLE "
        "gputune_host;"
        "CREATE ROLE ops LOGIN PASSWORD 'pw-ops' IN ROLE gputune_operator");
  }
  // The connection string of `role`.
  std::string As(const std::string& role) const {
    return "host=" + pg.socket_dir() + " dbname=" + db + " user=" + role +
           " password=pw-" + role;
  }
  // The first column of the first row of `q`, as the superuser; "" for none.
  std::string Sql(const std::string& q) const {
    auto rows = pg.Query(db, q);
    return rows.empty() ? std::string() : rows[0][0];
  }
  PostgresServer pg;
  std::string db, owner;
};

TEST_CASE(
    "host roles: a host publishes only as itself and cannot update, delete or "
    "tombstone another host's rows, an operator role deletes fleet-wide, "
    "entries show the role PostgreSQL vouches for") {
  GPUTUNE_REQUIRE_POSTGRES();
  RolesFleet f("roles");
  const std::string host_a = f.As("host_a"), host_b = f.As("host_b");
  DaemonProcess a(FleetDaemon(host_a));
  DaemonProcess b(FleetDaemon(host_b));
  REQUIRE(Soon([&] { return Fleet(a).connected() && Fleet(b).connected(); }));
  const v1::Key key = DenseKey(3, 64, 64);
  Record(b, key, "k.b");
  REQUIRE(Soon([&] { return Serves(a, key, "k.b"); }));
  const std::string key_id = KeyId(key);
  auto sql = [&](const std::string& q) { return f.Sql(q); };
  CHECK(sql("SELECT publisher_role FROM fleet_entries WHERE key_id = '" +
            key_id + "'") == "host_b");
  // What a reads of it names the role, not what the row's text says.
  const v1::Entry adopted = Served(a, key);
  CHECK(adopted.fleet().role() == "host_b");
  CHECK(adopted.recorded_by() == "fleet role host_b");
  {
    std::ostringstream out, err;
    REQUIRE(ctl::Main({"--endpoint=" + a.endpoint(), "get", KeyText(key)}, out,
                      err) == 0);
    INFO(out.str());
    CHECK(out.str().find("published by role host_b (says ") !=
          std::string::npos);
  }

  // A inserting "as B" is stored as A.
  const std::string fp = sql("SELECT fingerprint FROM fleet_entries LIMIT 1");
  v1::Entry mine = adopted;
  mine.clear_fleet();
  mine.set_source(v1::SOURCE_CLIENT_MEASURED);
  const v1::Key other = DenseKey(4, 64, 64);
  *mine.mutable_key() = other;
  CHECK(RunAs(host_a,
              "INSERT INTO fleet_entries (fingerprint, key_id, candidate_set, "
              "seq, fence, host, gpu, instance, entry, publisher_role) "
              "VALUES ('" +
                  fp + "', '" + KeyId(other) + "', 'cs1', 0, 0, 'b', 'b', " +
                  "'b', " + Bytea(mine.SerializeAsString()) + ", 'host_b')") ==
        "");
  CHECK(sql("SELECT publisher_role FROM fleet_entries WHERE key_id = '" +
            KeyId(other) + "'") == "host_a");
  REQUIRE(Soon([&] { return Served(b, other).fleet().role() == "host_a"; }));

  // A cannot change, delete or tombstone B's row, nor insert a tombstone.
  long changed = -1;
  CHECK(RunAs(host_a,
              "UPDATE fleet_entries SET entry = ''::bytea, host = 'x' WHERE "
              "key_id = '" +
                  key_id + "'",
              &changed) == "");
  CHECK(changed == 0);
  changed = -1;
  CHECK(RunAs(host_a,
              "UPDATE fleet_entries SET deleted = true WHERE key_id = '" +
                  key_id + "'",
              &changed) == "");
  CHECK(changed == 0);
  CHECK_FALSE(
      RunAs(host_a, "DELETE FROM fleet_entries WHERE key_id = '" + key_id + "'")
          .empty());
  CHECK_FALSE(
      RunAs(host_a, InsertRow(fp, "tomb/stone", "cs1", "''::bytea", 0, true))
          .empty());
  CHECK(sql("SELECT count(*) FROM fleet_entries WHERE NOT deleted AND "
            "publisher_role = 'host_b' AND length(entry) > 0") == "1");
  CHECK(Serves(a, key, "k.b"));

  // A host's own gputunectl delete --fleet leaves B's entry; the operator's
  // deletes it from every daemon.
  for (const auto& [conninfo, expect] :
       std::vector<std::pair<std::string, std::string>>{
           {host_a, "deleted 0 entries from the fleet"},
           {f.As("ops"), "deleted 1 entry from the fleet"}}) {
    std::ostringstream out, err;
    ctl::Main({"--endpoint=" + a.endpoint(), "delete", KeyText(key),
               "--fleet=" + conninfo},
              out, err);
    INFO(out.str() << err.str());
    CHECK(out.str().find(expect) != std::string::npos);
    if (conninfo == host_a) CHECK(Serves(b, key, "k.b"));
  }
  REQUIRE(Soon([&] { return State(b, key) == v1::KEY_STATE_MISS; }));
  CHECK(sql("SELECT publisher_role FROM fleet_entries WHERE key_id = '" +
            key_id + "' AND deleted") == "ops");
}

TEST_CASE(
    "host roles: a host cannot take over, renew or release another host's "
    "live fleet claim, and a claim's fence and role come from PostgreSQL") {
  GPUTUNE_REQUIRE_POSTGRES();
  RolesFleet f("claims");
  const std::string host_a = f.As("host_a");
  // Leases far longer than the test: b's claim is live throughout.
  DaemonProcess a(FleetDaemon(host_a, "10m"));
  DaemonProcess b(FleetDaemon(f.As("host_b"), "10m"));
  REQUIRE(Soon([&] { return Fleet(a).connected() && Fleet(b).connected(); }));
  const v1::Key key = DenseKey(5, 64, 64);
  auto claim = [&](const DaemonProcess& d) {
    v1::ClaimRequest req;
    *req.mutable_key() = key;
    req.set_holder("claims-test");
    v1::ClaimResponse resp;
    const grpc::Status s = d.Stub()->Claim(Ctx().get(), req, &resp);
    INFO(s.error_message());
    REQUIRE(s.ok());
    return resp;
  };
  const v1::ClaimResponse held = claim(b);
  REQUIRE(held.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  const std::string where = " WHERE key_id = '" + KeyId(key) + "'";
  const std::string row = " FROM fleet_claims" + where;
  CHECK(f.Sql("SELECT claimer_role" + row) == "host_b");
  const std::string fence = f.Sql("SELECT fence" + row);
  const std::string b_host = f.Sql("SELECT host" + row);

  // What host_a may write by hand changes nothing of b's live claim: no
  // release, no early end, no new fence or holder, no take-over by
  // claiming as b's instance.
  for (const std::string& q : std::vector<std::string>{
           "UPDATE fleet_claims SET released = true" + where,
           "UPDATE fleet_claims SET expires_at = clock_timestamp()" + where,
           "UPDATE fleet_claims SET fence = 1, host = 'evil'" + where,
           "INSERT INTO fleet_claims (fingerprint, key_id, fence, host, gpu, "
           "  instance, expires_at) "
           "SELECT fingerprint, key_id, 7, 'evil', 'evil', instance, "
           "  clock_timestamp() + interval '1 hour'" +
               row +
               " ON CONFLICT (fingerprint, key_id) DO UPDATE SET "
               "  fence = EXCLUDED.fence, host = EXCLUDED.host, "
               "  instance = EXCLUDED.instance, "
               "  expires_at = EXCLUDED.expires_at, released = false"}) {
    INFO(q);
    long changed = -1;
    CHECK(RunAs(host_a, q, &changed) == "");
    CHECK(changed == 0);
  }
  CHECK_FALSE(RunAs(host_a, "DELETE" + row).empty());  // no DELETE grant
  CHECK(f.Sql("SELECT fence" + row) == fence);
  CHECK(f.Sql("SELECT host" + row) == b_host);
  CHECK(f.Sql("SELECT claimer_role" + row) == "host_b");
  CHECK(f.Sql("SELECT released::text" + row) == "false");
  // a's daemon sees the claim as b's, and names the role.
  const v1::ClaimResponse pending = claim(a);
  REQUIRE(pending.outcome() == v1::CLAIM_OUTCOME_PENDING);
  INFO(pending.claim().holder());
  CHECK(pending.claim().holder().find("(fleet claim " + fence +
                                      " of role host_b)") != std::string::npos);

  // Once b abandons it, host_a may take the key over, but as itself and
  // with a fence from the sequence, whatever it writes.
  {
    v1::AbandonRequest req;
    req.set_claim_id(held.claim().claim_id());
    v1::AbandonResponse resp;
    REQUIRE(b.Stub()->Abandon(Ctx().get(), req, &resp).ok());
  }
  REQUIRE(Soon([&] { return f.Sql("SELECT released::text" + row) == "true"; }));
  long changed = -1;
  CHECK(RunAs(host_a,
              "UPDATE fleet_claims SET released = false, fence = 7, "
              "  claimer_role = 'host_b', "
              "  expires_at = clock_timestamp() + interval '1 hour'" +
                  where,
              &changed) == "");
  CHECK(changed == 1);
  CHECK(f.Sql("SELECT claimer_role" + row) == "host_a");
  CHECK(std::stoll(f.Sql("SELECT fence" + row)) > std::stoll(fence));
}

}  // namespace gputune
