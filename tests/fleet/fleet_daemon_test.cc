// The fleet tier end to end: real gputuned processes (host backend: the same
// fingerprint in every process of this machine) sharing a real PostgreSQL.
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/gputunectl/commands.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "tests/fleet/fleet_test_support.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/metrics_text.h"

namespace gputune {
namespace {

using testing::Ctx;
using testing::DaemonProcess;
using testing::DenseKey;
using testing::PostgresServer;
using Steady = std::chrono::steady_clock;

// Flags for a fleet daemon: short leases and polls keep the suite quick.
std::vector<std::string> FleetFlags(const std::string& conninfo,
                                    std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"--backend=host",
                                    "--fleet=" + conninfo,
                                    "--tune_budget=100ms",
                                    "--fleet_lease_ttl=1s",
                                    "--fleet_poll_interval=200ms",
                                    "--autotune_log=disabled",
                                    "--log_level=debug"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

v1::GetStatusResponse Status(const DaemonProcess& d) {
  v1::GetStatusResponse resp;
  REQUIRE(d.Stub()->GetStatus(Ctx().get(), {}, &resp).ok());
  return resp;
}

// A Lookup's answer as a KeyStatus: its state and its entry, parsed.
v1::KeyStatus Lookup(const DaemonProcess& d, const v1::Key& key) {
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse resp;
  REQUIRE(d.Stub()->Lookup(Ctx().get(), req, &resp).ok());
  v1::KeyStatus status;
  *status.mutable_key() = key;
  status.set_state(resp.status().state());
  if (!resp.status().entry().empty()) {
    REQUIRE(status.mutable_entry()->ParseFromString(resp.status().entry()));
  }
  return status;
}

v1::Entry GetEntry(const DaemonProcess& d, const v1::Key& key) {
  v1::GetEntryRequest req;
  *req.mutable_key() = key;
  v1::GetEntryResponse resp;
  REQUIRE(d.Stub()->GetEntry(Ctx().get(), req, &resp).ok());
  return resp.entry();
}

// Deterministic bytes (map fields in key order): equal messages, equal bytes.
std::string Bytes(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::io::StringOutputStream stream(&out);
  google::protobuf::io::CodedOutputStream coded(&stream);
  coded.SetSerializationDeterministic(true);
  m.SerializeToCodedStream(&coded);
  coded.Trim();
  return out;
}

// Polls pred every 20 ms until it holds or `seconds` pass.
bool WaitUntil(const std::function<bool()>& pred, double seconds = 20) {
  const auto give_up = Steady::now() + std::chrono::milliseconds(
                                           static_cast<int>(seconds * 1000));
  while (Steady::now() < give_up) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return pred();
}

bool AllHit(const DaemonProcess& d, const std::vector<v1::Key>& keys) {
  for (const v1::Key& key : keys) {
    if (Lookup(d, key).state() != v1::KEY_STATE_HIT) return false;
  }
  return true;
}

// A client's Claim + Record of `key` with `kernel` chosen; the Record's
// status.
grpc::Status ClaimAndRecord(const DaemonProcess& d, const v1::Key& key,
                            const std::string& kernel) {
  auto stub = d.Stub();
  v1::ClaimRequest claim;
  *claim.mutable_key() = key;
  claim.set_holder("fleet-test-client");
  v1::ClaimResponse granted;
  grpc::Status s = stub->Claim(Ctx().get(), claim, &granted);
  if (!s.ok()) return s;
  if (granted.outcome() != v1::CLAIM_OUTCOME_GRANTED) {
    return grpc::Status(grpc::StatusCode::ABORTED, "claim not granted");
  }
  v1::RecordRequest req;
  req.set_claim_id(granted.claim().claim_id());
  req.mutable_execution()->set_kernel(kernel);
  (*req.mutable_execution()->mutable_params())["tile"] = 64;
  auto* m = req.add_measurements();
  *m->mutable_execution() = req.execution();
  m->set_validation(v1::VALIDATION_PASSED);
  *m->mutable_median() = ToProto(absl::Microseconds(10));
  m->set_samples(5);
  m->set_chosen(true);
  v1::RecordResponse resp;
  return stub->Record(Ctx().get(), req, &resp);
}

// Starts one client process (tune_client.cc) per endpoint in `endpoints`;
// each asks TuneDense (wait=true) for every key at once and exits 0 when all
// were HITs. Returns how many processes succeeded.
int RunClientProcesses(const std::vector<std::string>& endpoints,
                       const std::vector<v1::Key>& keys) {
  std::vector<std::string> args = {GPUTUNE_FLEET_TUNE_CLIENT, ""};
  for (const v1::Key& key : keys) {
    const auto& d = key.dense_bf16();
    args.push_back(std::to_string(d.tokens()) + "x" +
                   std::to_string(d.input_features()) + "x" +
                   std::to_string(d.output_features()));
  }
  std::vector<pid_t> pids;
  std::fflush(nullptr);  // or the children write our buffers again
  for (const std::string& endpoint : endpoints) {
    args[1] = endpoint;
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  int ok = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok += WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

bool Connected(const DaemonProcess& d) { return Status(d).fleet().connected(); }

// A PostgreSQL server with one fleet database and two daemons linked to it
// (a with extra flags `a_flags`): `auto& [pg, conninfo, a, b] = fleet;`.
struct FleetPair {
  explicit FleetPair(const std::string& db,
                     std::vector<std::string> a_flags = {})
      : conninfo(pg.CreateDatabase(db)),
        a(FleetFlags(conninfo, std::move(a_flags))),
        b(FleetFlags(conninfo)) {
    REQUIRE(WaitUntil([&] { return Connected(a) && Connected(b); }));
  }
  PostgresServer pg;
  std::string conninfo;
  DaemonProcess a;
  DaemonProcess b;
};

}  // namespace

TEST_CASE(
    "3 daemons x 4 client processes asking for 4 new keys run 4 jobs in the "
    "whole fleet and answer identical executions, and a late daemon is warm at "
    "once") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("dedup");
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  for (int i = 0; i < 3; ++i) {
    daemons.push_back(std::make_unique<DaemonProcess>(FleetFlags(conninfo)));
  }
  for (const auto& d : daemons) {
    REQUIRE(WaitUntil([&] { return Connected(*d); }));
  }
  const std::vector<v1::Key> keys = {
      DenseKey(1, 128, 128), DenseKey(2, 128, 128), DenseKey(3, 128, 256),
      DenseKey(4, 256, 128)};
  std::vector<std::string> endpoints;
  for (const auto& d : daemons) {
    for (int c = 0; c < 4; ++c) endpoints.push_back(d->endpoint());
  }
  const int clients_ok = RunClientProcesses(endpoints, keys);
  if (clients_ok != 12) {
    for (const auto& d : daemons)
      std::printf("--- %s\n%s", d->dir().c_str(), d->Log().c_str());
  }
  REQUIRE(clients_ok == 12);

  uint64_t jobs = 0;
  for (const auto& d : daemons) jobs += Status(*d).jobs_completed();
  if (jobs != 4) {
    for (const auto& d : daemons) {
      std::printf("--- %s\n%s", d->dir().c_str(), d->Log().c_str());
    }
  }
  CHECK(jobs == 4);
  CHECK(pg.QueryNumber("dedup", "SELECT count(*) FROM fleet_entries") == 4);
  for (const v1::Key& key : keys) {
    const std::string first =
        Bytes(Lookup(*daemons[0], key).entry().execution());
    for (const auto& d : daemons) {
      const v1::KeyStatus s = Lookup(*d, key);
      REQUIRE(s.state() == v1::KEY_STATE_HIT);
      CHECK(Bytes(s.entry().execution()) == first);
    }
  }
  // Entries adopted from the fleet say so, and who measured them.
  int adopted = 0;
  for (const auto& d : daemons) {
    for (const v1::Key& key : keys) {
      const v1::Entry e = GetEntry(*d, key);
      if (e.source() != v1::SOURCE_FLEET) continue;
      ++adopted;
      CHECK(e.fleet().published_source() == v1::SOURCE_DAEMON_MEASURED);
      CHECK_FALSE(e.fleet().host().empty());
      CHECK_FALSE(e.fleet().gpu().empty());
      CHECK(e.fleet().instance() != Status(*d).fleet().instance());
      CHECK(e.fleet().seq() > 0);
    }
  }
  CHECK(adopted == 8);  // each key measured once, adopted by the other two

  // A daemon that joins later: every fleet entry a local HIT, without one
  // benchmark. (How soon after serving is a latency: bench/fleet's "warm"
  // part measures it; the wait here is generous, for a loaded machine.)
  const auto start = Steady::now();
  DaemonProcess late(FleetFlags(conninfo));
  const auto serving = Steady::now();
  REQUIRE(WaitUntil([&] { return AllHit(late, keys); }, 60));
  const double warm =
      std::chrono::duration<double>(Steady::now() - serving).count();
  INFO("warm " << warm << " s after serving ("
               << std::chrono::duration<double>(serving - start).count()
               << " s to serve)");
  CHECK(Status(late).jobs_completed() == 0);
  CHECK(Status(late).fleet().adopted() == 4);
}

TEST_CASE(
    "the fleet works over TCP with TLS (sslmode=verify-full), and a daemon "
    "that does not trust the server's certificate serves locally and says "
    "why") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg(PostgresServer::Options{.tls = true});
  pg.CreateDatabase("tls");
  // The server is on another "host": TCP to localhost, its certificate
  // checked against the CA and the name.
  const std::string conninfo = pg.TlsConnInfo("tls");
  DaemonProcess a(FleetFlags(conninfo));
  DaemonProcess b(FleetFlags(conninfo));
  REQUIRE(WaitUntil([&] { return Connected(a) && Connected(b); }));
  // The server saw TLS connections from both (pg_stat_ssl, over the unix
  // socket: every TCP session of the fleet database is encrypted).
  const auto sessions = pg.Query(
      "postgres",
      "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT "
      "s.ssl) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE "
      "a.datname = 'tls'");
  REQUIRE(sessions.size() == 1);
  CHECK(std::stoll(sessions[0][0]) >= 2);  // encrypted
  CHECK(std::stoll(sessions[0][1]) == 0);  // plain
  // The password stays out of what the daemon reports.
  CHECK(Status(a).fleet().target().find(PostgresServer::kPassword) ==
        std::string::npos);
  const v1::Key key = DenseKey(1, 64, 128);
  REQUIRE(ClaimAndRecord(a, key, "k.tls").ok());
  REQUIRE(WaitUntil([&] {
    return Lookup(b, key).state() == v1::KEY_STATE_HIT &&
           Lookup(b, key).entry().execution().kernel() == "k.tls";
  }));

  // A daemon given another CA refuses the server, says why, and serves
  // from its own database.
  PostgresServer other(PostgresServer::Options{.tls = true});
  DaemonProcess distrustful(FleetFlags(pg.TlsConnInfo("tls", other.ca_file())));
  // Its first report is "connecting"; then libpq's reason.
  WaitUntil([&] {
    return Status(distrustful).fleet().error().find("certificate") !=
           std::string::npos;
  });
  const v1::FleetStatus status = Status(distrustful).fleet();
  INFO(status.error());
  CHECK_FALSE(status.connected());
  CHECK(status.error().find("certificate verify failed") != std::string::npos);
  REQUIRE(ClaimAndRecord(distrustful, DenseKey(2, 64, 128), "k.local").ok());
  CHECK(Lookup(distrustful, DenseKey(2, 64, 128)).state() == v1::KEY_STATE_HIT);
  CHECK(Lookup(distrustful, key).state() == v1::KEY_STATE_MISS);
}

TEST_CASE(
    "Records acknowledged while PostgreSQL is down, across a kill -9 of the "
    "publisher, reach the fleet and the other daemons once it is back") {
  GPUTUNE_REQUIRE_POSTGRES();
  FleetPair fleet("outage");
  auto& [pg, conninfo, a, b] = fleet;

  pg.Stop();
  REQUIRE(WaitUntil([&] { return !Connected(a); }));
  const v1::FleetStatus down = Status(a).fleet();
  CHECK_FALSE(down.error().empty());
  {
    grpc::health::v1::HealthCheckResponse health;
    REQUIRE(grpc::health::v1::Health::NewStub(a.Channel())
                ->Check(Ctx().get(), {}, &health)
                .ok());
    CHECK(health.status() == grpc::health::v1::HealthCheckResponse::SERVING);
  }
  // Health stays SERVING; Records are acknowledged locally.
  std::vector<v1::Key> keys;
  for (int i = 0; i < 6; ++i) keys.push_back(DenseKey(10 + i, 64, 64));
  for (int i = 0; i < 3; ++i) {
    REQUIRE(ClaimAndRecord(a, keys[i], "k" + std::to_string(i)).ok());
  }
  CHECK(Status(a).fleet().outbox_depth() == 3);
  CHECK(Status(a).fleet().local_only_claims() >= 3);
  a.Kill();  // kill -9 with three acknowledged Records unpublished
  a.Start();
  CHECK(Status(a).fleet().outbox_depth() == 3);  // the outbox survived
  for (int i = 3; i < 6; ++i) {
    REQUIRE(ClaimAndRecord(a, keys[i], "k" + std::to_string(i)).ok());
  }
  CHECK(Status(a).fleet().outbox_depth() == 6);
  CHECK(AllHit(a, keys));
  CHECK(Lookup(b, keys[0]).state() == v1::KEY_STATE_MISS);

  pg.Start();
  REQUIRE(WaitUntil([&] { return Status(a).fleet().outbox_depth() == 0; }));
  REQUIRE(WaitUntil([&] { return AllHit(b, keys); }));
  CHECK(pg.QueryNumber("outage", "SELECT count(*) FROM fleet_entries") == 6);
  CHECK(pg.QueryNumber(
            "outage", "SELECT count(DISTINCT key_id) FROM fleet_entries") == 6);
  for (int i = 0; i < 6; ++i) {
    const v1::Entry e = GetEntry(b, keys[i]);
    CHECK(e.execution().kernel() == "k" + std::to_string(i));
    CHECK(e.source() == v1::SOURCE_FLEET);
    CHECK(e.fleet().published_source() == v1::SOURCE_CLIENT_MEASURED);
    CHECK(e.fleet().fence() == 0);  // recorded without a fleet claim
  }
  CHECK(Status(b).entries() == 6);
  CHECK(Status(a).fleet().connected());
}

TEST_CASE(
    "a fleet holder stopped past its lease is taken over, and after it resumes "
    "its publish is refused and the canonical entry stands") {
  GPUTUNE_REQUIRE_POSTGRES();
  // A benchmarks slowly, so that it can be stopped while it holds the key.
  FleetPair fleet("fence", {"--tune_budget=3s"});
  auto& [pg, conninfo, a, b] = fleet;
  const v1::Key key = DenseKey(5, 128, 128);
  {
    v1::TuneDenseRequest req;
    *req.mutable_key() = key;
    req.set_wait(false);
    v1::TuneDenseResponse resp;
    REQUIRE(a.Stub()->TuneDense(Ctx().get(), req, &resp).ok());
  }
  const std::string a_instance = Status(a).fleet().instance();
  REQUIRE(WaitUntil([&] {
    return pg.QueryNumber(
               "fence", "SELECT count(*) FROM fleet_claims WHERE instance = '" +
                            a_instance + "' AND NOT released") == 1;
  }));
  REQUIRE(kill(a.pid(), SIGSTOP) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // > lease

  // B takes the key over.
  {
    v1::TuneDenseRequest req;
    *req.mutable_key() = key;
    req.set_wait(true);
    v1::TuneDenseResponse resp;
    REQUIRE(b.Stub()->TuneDense(Ctx().get(), req, &resp).ok());
    CHECK(resp.status().state() == v1::KEY_STATE_HIT);
  }
  CHECK(Status(b).jobs_completed() == 1);
  const std::string b_instance = Status(b).fleet().instance();
  const std::string canonical_query =
      "SELECT instance FROM fleet_entries WHERE NOT deleted";
  // B's Record is published in the background, after TuneDense answered.
  REQUIRE(WaitUntil(
      [&] { return pg.Query("fence", canonical_query).size() == 1; }));
  CHECK(pg.Query("fence", canonical_query)[0][0] == b_instance);

  REQUIRE(kill(a.pid(), SIGCONT) == 0);
  // A finishes its benchmark; the fleet refuses it (superseded fence) and A
  // serves the canonical entry.
  REQUIRE(WaitUntil([&] { return Status(a).fleet().refused() == 1; }, 30));
  CHECK(Status(a).jobs_completed() == 1);
  REQUIRE(
      WaitUntil([&] { return GetEntry(a, key).source() == v1::SOURCE_FLEET; }));
  CHECK(Bytes(GetEntry(a, key).execution()) ==
        Bytes(GetEntry(b, key).execution()));
  CHECK(GetEntry(a, key).fleet().instance() == b_instance);
  // Refused one of two ways, by timing: A's publish carries its lost fence
  // and is superseded; or A's follower adopted B's entry while the job still
  // ran, the keeper then let the fleet claim go (the key was no longer
  // PENDING on it), and the unfenced publish meets B's canonical entry.
  // (Seen under load, 3 runs in 6 with two busy loops beside.)
  INFO("a's log:\n" << a.Log() << "\nb's log:\n" << b.Log());
  CHECK((a.Log().find("superseded") != std::string::npos ||
         a.Log().find("already has a canonical entry") != std::string::npos));
  REQUIRE(pg.Query("fence", canonical_query).size() == 1);
  CHECK(pg.Query("fence", canonical_query)[0][0] == b_instance);
}

TEST_CASE(
    "daemons of different fingerprints share a fleet database but never "
    "each other's entries") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("fingerprints");
  DaemonProcess host(FleetFlags(conninfo));
  // The fault backend's fingerprint says "fault": another tuning target.
  std::vector<std::string> fault_flags = FleetFlags(conninfo);
  fault_flags[0] = "--backend=fault";
  DaemonProcess fault(fault_flags);
  REQUIRE(WaitUntil([&] { return Connected(host) && Connected(fault); }));
  CHECK(Status(host).fingerprint().backend() == "host");
  CHECK(Status(fault).fingerprint().backend() == "fault");

  const v1::Key shared = DenseKey(6, 128, 128);
  const v1::Key host_only = DenseKey(7, 128, 128);
  REQUIRE(RunClientProcesses({host.endpoint(), fault.endpoint()}, {shared}) ==
          2);
  REQUIRE(RunClientProcesses({host.endpoint()}, {host_only}) == 1);
  REQUIRE(WaitUntil([&] { return Status(host).fleet().published() == 2; }));
  // Both measured the shared key: one job each, one fleet entry each.
  CHECK(Status(host).jobs_completed() == 2);
  CHECK(Status(fault).jobs_completed() == 1);
  CHECK(pg.QueryNumber(
            "fingerprints",
            "SELECT count(DISTINCT fingerprint) FROM fleet_entries") == 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));  // 5 polls
  CHECK(Lookup(fault, host_only).state() == v1::KEY_STATE_MISS);
  CHECK(Status(fault).fleet().adopted() == 0);
  CHECK(Status(host).fleet().adopted() == 0);
  CHECK(GetEntry(fault, shared).fingerprint().backend() == "fault");
  CHECK(GetEntry(host, shared).source() == v1::SOURCE_DAEMON_MEASURED);
}

TEST_CASE(
    "a bad conninfo, a wrong password or a newer fleet schema: a clear "
    "error, and the daemon serves and tunes locally") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  pg.CreateDatabase("errors");
  const std::string newer = pg.CreateDatabase("newer");
  {
    // Make the schema, then claim it is from a later gputuned.
    DaemonProcess maker(FleetFlags(newer));
    REQUIRE(WaitUntil([&] { return Connected(maker); }));
  }
  pg.Query("newer",
           "UPDATE fleet_meta SET value = '99' WHERE name = 'schema_version'");
  struct Case {
    std::string conninfo;
    std::string error;
  };
  const std::vector<Case> cases = {
      {"host=/nonexistent-gputune-fleet dbname=fleet",
       "/nonexistent-gputune-fleet"},
      {pg.ConnInfo("errors", "wrong-password"),
       "password authentication failed"},
      {newer, "fleet schema version 99 is newer"},
  };
  for (const Case& c : cases) {
    INFO(c.conninfo);
    DaemonProcess d(FleetFlags(c.conninfo));
    REQUIRE(WaitUntil([&] {
      return Status(d).fleet().error().find(c.error) != std::string::npos;
    }));
    const v1::GetStatusResponse s = Status(d);
    CHECK_FALSE(s.fleet().connected());
    CHECK(s.fleet().target().find("wrong-password") == std::string::npos);
    v1::TuneDenseRequest req;
    *req.mutable_key() = DenseKey(8, 64, 64);
    req.set_wait(true);
    v1::TuneDenseResponse resp;
    REQUIRE(d.Stub()->TuneDense(Ctx().get(), req, &resp).ok());
    CHECK(resp.status().state() == v1::KEY_STATE_HIT);
    CHECK(Status(d).fleet().outbox_depth() == 1);
    CHECK(d.Log().find(c.error) != std::string::npos);
  }
}

}  // namespace gputune

namespace gputune {

TEST_CASE(
    "a daemon role with only the documented grants claims, publishes and "
    "follows, and cannot create the schema") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string owner = pg.CreateDatabase("granted");
  {
    DaemonProcess maker(FleetFlags(owner));  // the owner makes the schema
    REQUIRE(WaitUntil([&] { return Connected(maker); }));
  }
  pg.CreateDatabase("empty");
  // docs/operations.md, "Roles and row-level security": one role for all.
  pg.Query("postgres", "CREATE ROLE gputune_daemon LOGIN PASSWORD 'daemon-pw'");
  pg.Query("granted",
           "GRANT CONNECT ON DATABASE granted TO gputune_daemon;"
           "GRANT USAGE ON SCHEMA public TO gputune_daemon;"
           "GRANT SELECT ON fleet_meta TO gputune_daemon;"
           "GRANT SELECT, INSERT, UPDATE ON fleet_entries, fleet_claims TO "
           "gputune_daemon;"
           "GRANT USAGE ON SEQUENCE fleet_fence, fleet_feed TO gputune_daemon");
  auto as_daemon = [&](const std::string& db) {
    return "host=" + pg.socket_dir() + " dbname=" + db +
           " user=gputune_daemon password=daemon-pw";
  };
  DaemonProcess a(FleetFlags(as_daemon("granted")));
  DaemonProcess b(FleetFlags(as_daemon("granted")));
  REQUIRE(WaitUntil([&] { return Connected(a) && Connected(b); }));
  const v1::Key key = DenseKey(9, 128, 128);
  REQUIRE(RunClientProcesses({a.endpoint(), b.endpoint()}, {key}) == 2);
  CHECK(Status(a).jobs_completed() + Status(b).jobs_completed() == 1);
  CHECK(pg.QueryNumber("granted", "SELECT count(*) FROM fleet_entries") == 1);
  REQUIRE(ClaimAndRecord(a, DenseKey(10, 64, 64), "granted-kernel").ok());
  REQUIRE(WaitUntil([&] {
    return Lookup(b, DenseKey(10, 64, 64)).state() == v1::KEY_STATE_HIT;
  }));

  DaemonProcess fresh(FleetFlags(as_daemon("empty")));
  REQUIRE(WaitUntil([&] {
    return Status(fresh).fleet().error().find("this role may not") !=
           std::string::npos;
  }));
  CHECK_FALSE(Status(fresh).fleet().connected());
}

}  // namespace gputune

namespace gputune {

TEST_CASE(
    "gputunectl delete --fleet drops an entry from every daemon of the fleet, "
    "and the next TuneDense tunes it again") {
  GPUTUNE_REQUIRE_POSTGRES();
  FleetPair fleet("retune");
  auto& [pg, conninfo, a, b] = fleet;
  const v1::Key key = DenseKey(11, 128, 128);
  const v1::Key kept = DenseKey(12, 128, 128);
  REQUIRE(RunClientProcesses({a.endpoint()}, {key, kept}) == 1);
  REQUIRE(WaitUntil([&] { return AllHit(b, {key, kept}); }));

  std::ostringstream out, err;
  const int code = ctl::Main({"--endpoint=" + a.endpoint(), "delete",
                              KeyText(key), "--fleet=" + conninfo},
                             out, err);
  INFO(out.str() << err.str());
  REQUIRE(code == 0);
  CHECK(out.str().find("deleted 1 entry from the fleet") != std::string::npos);
  // Both daemons drop it (b through the feed), and keep the other key.
  REQUIRE(WaitUntil([&] {
    return Lookup(b, key).state() == v1::KEY_STATE_MISS &&
           Lookup(a, key).state() == v1::KEY_STATE_MISS;
  }));
  CHECK(Lookup(b, kept).state() == v1::KEY_STATE_HIT);

  const uint64_t jobs_before = Status(b).jobs_completed();
  REQUIRE(RunClientProcesses({b.endpoint()}, {key}) == 1);
  CHECK(Status(b).jobs_completed() == jobs_before + 1);
  REQUIRE(WaitUntil([&] { return AllHit(a, {key}); }));
  CHECK(pg.QueryNumber(
            "retune", "SELECT count(*) FROM fleet_entries WHERE NOT deleted") ==
        2);
}

}  // namespace gputune

namespace gputune {
namespace {

// An entry of `d`'s fingerprint for `key` with `kernel` chosen, as an
// operator's export holds it.
v1::Entry ImportableEntry(const DaemonProcess& d, const v1::Key& key,
                          const std::string& kernel) {
  v1::Entry e;
  *e.mutable_key() = key;
  e.mutable_execution()->set_kernel(kernel);
  *e.mutable_fingerprint() = Status(d).fingerprint();
  return e;
}

grpc::Status Import(const DaemonProcess& d,
                    const std::vector<v1::Entry>& entries) {
  v1::ImportEntriesRequest req;
  for (const v1::Entry& e : entries) *req.add_entries() = e;
  v1::ImportEntriesResponse resp;
  return d.Stub()->ImportEntries(Ctx().get(), req, &resp);
}

std::map<std::string, double> Metrics(const DaemonProcess& d) {
  v1::GetMetricsResponse resp;
  REQUIRE(d.AdminStub()->GetMetrics(Ctx().get(), {}, &resp).ok());
  return testing::Samples(resp.text());
}

std::string MetricsText(const DaemonProcess& d) {
  v1::GetMetricsResponse resp;
  REQUIRE(d.AdminStub()->GetMetrics(Ctx().get(), {}, &resp).ok());
  return resp.text();
}

// A series of `d`'s metrics (device="0" is on every series).
double Metric(const DaemonProcess& d, const std::string& name) {
  const std::map<std::string, double> all = Metrics(d);
  auto it = all.find(name + "{device=\"0\"}");
  INFO(name);
  REQUIRE(it != all.end());
  return it->second;
}

}  // namespace

TEST_CASE(
    "entries imported into one daemon go through its outbox to the fleet and "
    "the other daemons, and cannot replace a canonical fleet entry") {
  GPUTUNE_REQUIRE_POSTGRES();
  FleetPair fleet("import");
  auto& [pg, conninfo, a, b] = fleet;
  const v1::Key canonical = DenseKey(20, 64, 64);
  REQUIRE(ClaimAndRecord(a, canonical, "recorded").ok());
  REQUIRE(WaitUntil([&] { return AllHit(b, {canonical}); }));

  std::vector<v1::Key> keys;
  std::vector<v1::Entry> entries;
  for (uint32_t m = 21; m <= 30; ++m) {
    keys.push_back(DenseKey(m, 64, 64));
    entries.push_back(
        ImportableEntry(a, keys.back(), "imported-" + std::to_string(m)));
  }
  // Another fingerprint's entry: kept locally (STALE), never published.
  const v1::Key foreign = DenseKey(31, 64, 64);
  entries.push_back(ImportableEntry(a, foreign, "foreign"));
  entries.back().mutable_fingerprint()->set_device_name("another GPU");
  REQUIRE(Import(a, entries).ok());
  REQUIRE(WaitUntil([&] { return AllHit(b, keys); }));
  REQUIRE(WaitUntil([&] { return Status(a).fleet().outbox_depth() == 0; }));
  for (uint32_t m = 21; m <= 30; ++m) {
    const v1::Entry e = GetEntry(b, DenseKey(m, 64, 64));
    CHECK(e.execution().kernel() == "imported-" + std::to_string(m));
    CHECK(e.source() == v1::SOURCE_FLEET);
    CHECK(e.fleet().published_source() == v1::SOURCE_IMPORTED);
    CHECK(e.fleet().instance() == Status(a).fleet().instance());
    CHECK(e.fleet().fence() == 0);  // an import holds no fleet claim
  }
  CHECK(GetEntry(a, foreign).execution().kernel() == "foreign");
  CHECK(Lookup(b, foreign).state() == v1::KEY_STATE_MISS);
  CHECK(pg.QueryNumber("import", "SELECT count(*) FROM fleet_entries") == 11);

  // An import of a key the fleet has (on either daemon, the one that
  // published it too) gives way to the fleet's entry.
  for (const DaemonProcess* d : {&b, &a}) {
    const uint64_t refused = Status(*d).fleet().refused();
    REQUIRE(Import(*d, {ImportableEntry(*d, canonical, "import-over")}).ok());
    REQUIRE(WaitUntil([&] { return Status(*d).fleet().refused() > refused; }));
    REQUIRE(WaitUntil([&] {
      return GetEntry(*d, canonical).execution().kernel() == "recorded";
    }));
    CHECK(Status(*d).fleet().outbox_depth() == 0);
  }
  CHECK(pg.QueryNumber("import", "SELECT count(*) FROM fleet_entries") == 11);
  CHECK(pg.QueryNumber("import",
                       "SELECT count(*) FROM fleet_entries WHERE "
                       "position('import-over'::bytea IN entry) > 0") == 0);
}

TEST_CASE(
    "a record PostgreSQL keeps refusing leaves the fleet outbox, logged and "
    "counted, without holding up the 300 records behind it") {
  GPUTUNE_REQUIRE_POSTGRES();
  FleetPair fleet("refused");
  auto& [pg, conninfo, a, b] = fleet;
  // An operator's constraint that this one key breaks: a permanent refusal.
  pg.Query("refused",
           "ALTER TABLE fleet_entries ADD CONSTRAINT no_poison "
           "CHECK (key_id NOT LIKE '%/poison/%')");
  const v1::Key poison = DenseKey(1, 64, 64, "cs1", "poison");
  std::vector<v1::Key> keys;
  std::vector<v1::Entry> entries = {ImportableEntry(a, poison, "refused")};
  for (uint32_t m = 1; m <= 300; ++m) {
    keys.push_back(DenseKey(m, 64, 64));
    entries.push_back(ImportableEntry(a, keys.back(), "k"));
  }
  // One transaction: the refused row is the oldest in the outbox, ahead of
  // more than a page (256) of others.
  REQUIRE(Import(a, entries).ok());
  REQUIRE(WaitUntil([&] { return AllHit(b, keys); }, 30));
  REQUIRE(WaitUntil([&] { return Status(a).fleet().outbox_depth() == 0; }, 30));
  const v1::FleetStatus status = Status(a).fleet();
  CHECK(status.outbox_dropped() == 1);
  CHECK(status.publish_errors() >= 5);
  CHECK(status.published() == 300);
  CHECK(pg.QueryNumber("refused", "SELECT count(*) FROM fleet_entries") == 300);
  CHECK(Lookup(a, poison).state() == v1::KEY_STATE_HIT);  // kept locally
  CHECK(Lookup(b, poison).state() == v1::KEY_STATE_MISS);
  CHECK(a.Log().find("dropped from the outbox") != std::string::npos);
  CHECK(a.Log().find("no_poison") != std::string::npos);
  // And gputunectl status.
  std::ostringstream out, err;
  REQUIRE(ctl::Main({"--endpoint=" + a.endpoint(), "status"}, out, err) == 0);
  CHECK(out.str().find(absl::StrCat("; ", status.publish_errors(),
                                    " publish errors, 1 dropped after "
                                    "repeated refusals (kept locally)")) !=
        std::string::npos);

  // The metrics say the same.
  CHECK(Metric(a, "gputune_fleet_outbox_dropped_total") == 1);
  CHECK(Metric(a, "gputune_fleet_publish_errors_total") ==
        static_cast<double>(status.publish_errors()));
  CHECK(Metric(a, "gputune_fleet_published_total") == 300);
  CHECK(Metric(a, "gputune_fleet_outbox_depth") == 0);
  CHECK(Metric(b, "gputune_fleet_adopted_total") == 300);
}

TEST_CASE(
    "the fleet metrics follow an outage: connected, outbox depth, feed lag, "
    "publishes and adoptions move, and promtool accepts them") {
  GPUTUNE_REQUIRE_POSTGRES();
  FleetPair fleet("metrics");
  auto& [pg, conninfo, a, b] = fleet;
  CHECK(Metric(a, "gputune_fleet_connected") == 1);
  CHECK(Metric(a, "gputune_fleet_outbox_depth") == 0);
  CHECK(Metric(b, "gputune_fleet_feed_lag_seconds") == 0);

  pg.Stop();
  REQUIRE(WaitUntil([&] { return !Connected(a); }));
  CHECK(Metric(a, "gputune_fleet_connected") == 0);
  std::vector<v1::Key> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(DenseKey(40 + i, 64, 64));
    REQUIRE(ClaimAndRecord(a, keys.back(), "k").ok());
  }
  CHECK(Metric(a, "gputune_fleet_outbox_depth") == 3);
  CHECK(Metric(a, "gputune_fleet_local_only_claims_total") >= 3);

  pg.Start();
  REQUIRE(WaitUntil([&] { return AllHit(b, keys); }));
  REQUIRE(
      WaitUntil([&] { return Metric(a, "gputune_fleet_outbox_depth") == 0; }));
  CHECK(Metric(a, "gputune_fleet_connected") == 1);
  CHECK(Metric(a, "gputune_fleet_published_total") == 3);
  CHECK(Metric(b, "gputune_fleet_adopted_total") == 3);
  CHECK(Metric(b, "gputune_fleet_feed_lag_seconds") > 0);
  CHECK(Metric(b, "gputune_fleet_feed_backlog") == 0);

  // While a tunes a key (slowly), its fleet claim shows, and b waits on it.
  v1::TuneDenseRequest req;
  *req.mutable_key() = DenseKey(44, 128, 128);
  req.set_wait(false);
  v1::TuneDenseResponse resp;
  REQUIRE(a.Stub()->TuneDense(Ctx().get(), req, &resp).ok());
  REQUIRE(
      WaitUntil([&] { return Metric(a, "gputune_fleet_claims_held") == 1; }));
  REQUIRE(b.Stub()->TuneDense(Ctx().get(), req, &resp).ok());
  CHECK(resp.status().state() == v1::KEY_STATE_PENDING);
  CHECK(Metric(b, "gputune_fleet_claims_waited") == 1);

  CHECK(testing::Promtool(a.dir(), MetricsText(a)) == "");
  CHECK(testing::Promtool(b.dir(), MetricsText(b)) == "");
}

namespace {

// A Claim by a client of `d`; the answer.
v1::ClaimResponse ClaimKey(const DaemonProcess& d, const v1::Key& key,
                           const std::string& holder = "fleet-test-client") {
  v1::ClaimRequest req;
  *req.mutable_key() = key;
  req.set_holder(holder);
  v1::ClaimResponse resp;
  const grpc::Status s = d.Stub()->Claim(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp;
}

// A client's Record of `claim_id` with `kernel` chosen.
grpc::Status RecordClaim(const DaemonProcess& d, uint64_t claim_id,
                         const std::string& kernel) {
  v1::RecordRequest req;
  req.set_claim_id(claim_id);
  req.mutable_execution()->set_kernel(kernel);
  v1::RecordResponse resp;
  return d.Stub()->Record(Ctx().get(), req, &resp);
}

grpc::Status RenewClaim(const DaemonProcess& d, uint64_t claim_id) {
  v1::RenewRequest req;
  req.set_claim_id(claim_id);
  v1::RenewResponse resp;
  return d.Stub()->Renew(Ctx().get(), req, &resp);
}

grpc::Status AbandonClaim(const DaemonProcess& d, uint64_t claim_id) {
  v1::AbandonRequest req;
  req.set_claim_id(claim_id);
  v1::AbandonResponse resp;
  return d.Stub()->Abandon(Ctx().get(), req, &resp);
}

// FleetFlags with the fleet lease set to `lease`.
std::vector<std::string> FleetFlagsWithLease(const std::string& conninfo,
                                             const std::string& lease) {
  std::vector<std::string> flags = FleetFlags(conninfo);
  for (std::string& f : flags) {
    if (f.rfind("--fleet_lease_ttl=", 0) == 0) f = "--fleet_lease_ttl=" + lease;
  }
  return flags;
}

}  // namespace

// Two daemons with long fleet leases (a stand-in would outlive the test's
// checks), a's client holding the fleet claim on `key` and b's Claim
// answered PENDING with a stand-in: `auto& [pg, a, b, held, pending]`.
struct StandIn {
  StandIn(const std::string& db, const v1::Key& key)
      : conninfo(pg.CreateDatabase(db)),
        a(FleetFlagsWithLease(conninfo, "10s")),
        b(FleetFlagsWithLease(conninfo, "10s")) {
    REQUIRE(WaitUntil([&] { return Connected(a) && Connected(b); }));
    held = ClaimKey(a, key);
    REQUIRE(held.outcome() == v1::CLAIM_OUTCOME_GRANTED);
    pending = ClaimKey(b, key, "another-client");
    REQUIRE(pending.outcome() == v1::CLAIM_OUTCOME_PENDING);
    REQUIRE(pending.claim().holder().rfind("fleet: ", 0) == 0);
    REQUIRE(pending.claim().claim_id() != 0);
    REQUIRE(Status(b).claims_size() == 1);
  }
  // a's client records `kernel`; b adopts the entry.
  void HolderRecords(const v1::Key& key, const std::string& kernel) {
    REQUIRE(RecordClaim(a, held.claim().claim_id(), kernel).ok());
    REQUIRE(WaitUntil(
        [&] { return Lookup(b, key).state() == v1::KEY_STATE_HIT; }, 8));
  }
  PostgresServer pg;
  std::string conninfo;
  DaemonProcess a;
  DaemonProcess b;
  v1::ClaimResponse held;
  v1::ClaimResponse pending;
};

TEST_CASE(
    "a fleet stand-in claim is never a grant: Renew, Record and Abandon of it "
    "are refused, naming the holder") {
  GPUTUNE_REQUIRE_POSTGRES();
  const v1::Key key = DenseKey(8, 128, 128);
  StandIn fleet("standin", key);
  const std::string holder = fleet.pending.claim().holder();
  const uint64_t stand_in = fleet.pending.claim().claim_id();
  for (const grpc::Status& s : {RenewClaim(fleet.b, stand_in),
                                RecordClaim(fleet.b, stand_in, "k.forged"),
                                AbandonClaim(fleet.b, stand_in)}) {
    INFO(s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(s.error_message().find(holder) != std::string::npos);
  }
  CHECK(Lookup(fleet.b, key).state() == v1::KEY_STATE_PENDING);
  // The holder records: its entry, not a forged one, is what b serves.
  fleet.HolderRecords(key, "k.real");
  CHECK(GetEntry(fleet.b, key).execution().kernel() == "k.real");
  CHECK(GetEntry(fleet.b, key).source() == v1::SOURCE_FLEET);
  CHECK(fleet.pg.QueryNumber("standin", "SELECT count(*) FROM fleet_entries") ==
        1);
}

TEST_CASE(
    "a fleet stand-in claim ends as soon as the entry it stood for is "
    "adopted, not at the end of the holder's lease") {
  GPUTUNE_REQUIRE_POSTGRES();
  const v1::Key key = DenseKey(8, 128, 128);
  StandIn fleet("adopted", key);
  fleet.HolderRecords(key, "k.real");
  const v1::GetStatusResponse after = Status(fleet.b);
  CHECK(after.claims_size() == 0);
  CHECK(after.fleet().claims_waited() == 0);
  // What gputunectl status shows: no live claim, none held by "fleet: ...".
  std::ostringstream out;
  std::ostringstream err;
  REQUIRE(ctl::Main({"--endpoint=" + fleet.b.endpoint(), "status"}, out, err) ==
          0);
  INFO(out.str());
  CHECK(out.str().find("fleet: ") == std::string::npos);
}

TEST_CASE(
    "a client claim whose fleet claim was lost is fenced: its Record is "
    "refused with the reason, and claiming the key again finds the new "
    "holder") {
  GPUTUNE_REQUIRE_POSTGRES();
  FleetPair fleet("fenced");
  auto& [pg, conninfo, a, b] = fleet;
  const v1::Key key = DenseKey(9, 128, 128);
  const v1::ClaimResponse granted = ClaimKey(a, key);
  REQUIRE(granted.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  const uint64_t id = granted.claim().claim_id();
  const std::string a_instance = Status(a).fleet().instance();
  REQUIRE(pg.QueryNumber(
              "fenced", "SELECT count(*) FROM fleet_claims WHERE instance = '" +
                            a_instance + "' AND NOT released") == 1);
  REQUIRE(kill(a.pid(), SIGSTOP) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // > lease
  // b's client takes the key over and holds it.
  const v1::ClaimResponse taken = ClaimKey(b, key, "new-holder");
  REQUIRE(taken.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  REQUIRE(kill(a.pid(), SIGCONT) == 0);
  REQUIRE(WaitUntil(
      [&] { return a.Log().find("lost fleet claim") != std::string::npos; }));
  // Once a knows, its client's Record is refused, saying why; not
  // acknowledged and replaced by the fleet's entry a moment later.
  const grpc::Status recorded = RecordClaim(a, id, "k.stale");
  INFO(recorded.error_message());
  CHECK(recorded.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(recorded.error_message().find("lost") != std::string::npos);
  CHECK(RenewClaim(a, id).error_code() ==
        grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(Lookup(a, key).state() != v1::KEY_STATE_HIT);
  // The client claims again: the fleet says who holds the key now.
  const v1::ClaimResponse again = ClaimKey(a, key);
  CHECK(again.outcome() == v1::CLAIM_OUTCOME_PENDING);
  CHECK(again.claim().holder().rfind("fleet: ", 0) == 0);
  // The new holder's result is the one every daemon serves.
  REQUIRE(RecordClaim(b, taken.claim().claim_id(), "k.new").ok());
  REQUIRE(WaitUntil([&] {
    return Lookup(a, key).state() == v1::KEY_STATE_HIT &&
           Lookup(a, key).entry().execution().kernel() == "k.new";
  }));
  CHECK(pg.QueryNumber("fenced", "SELECT count(*) FROM fleet_entries") == 1);
}

namespace {

// What ClaimsUnder saw: answers by status code and outcome, and when the
// last one came.
struct ClaimAnswers {
  int granted = 0;
  int deadline_exceeded = 0;
  int other = 0;
  std::vector<std::string> errors;
};

// Claims `keys` on `d` at once, one thread each, each with a deadline of
// `deadline_ms` (the client library's default is 2 s, ClientOptions).
ClaimAnswers ClaimsUnder(const DaemonProcess& d,
                         const std::vector<v1::Key>& keys, int deadline_ms) {
  absl::Mutex mu;
  ClaimAnswers answers;
  std::vector<std::thread> threads;
  for (const v1::Key& key : keys) {
    threads.emplace_back([&, key] {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(deadline_ms));
      v1::ClaimRequest req;
      *req.mutable_key() = key;
      req.set_holder("slow-fleet-client");
      v1::ClaimResponse resp;
      const grpc::Status s = d.Stub()->Claim(&ctx, req, &resp);
      absl::MutexLock lock(&mu);
      if (s.ok() && resp.outcome() == v1::CLAIM_OUTCOME_GRANTED) {
        ++answers.granted;
      } else if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        ++answers.deadline_exceeded;
      } else {
        ++answers.other;
        answers.errors.push_back(s.error_message());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return answers;
}

// Whether `d` lists a live claim on `key`.
bool HasClaim(const DaemonProcess& d, const v1::Key& key) {
  const v1::GetStatusResponse status = Status(d);
  for (const v1::Key& k : status.claim_keys()) {
    if (Bytes(k) == Bytes(key)) return true;
  }
  return false;
}

// One fleet claim whose caller gives up (300 ms) while PostgreSQL does not
// answer, then 9 concurrent Claims with the client library's default
// deadline: the first is never granted (not even later), the 9 are decided
// locally in time. `stall` makes PostgreSQL slow; `unstall` undoes it.
void ClaimsWhilePostgresStalls(PostgresServer& pg, const std::string& db,
                               const std::string& conninfo,
                               const std::function<void()>& stall,
                               const std::function<void()>& unstall) {
  DaemonProcess a(FleetFlags(conninfo));
  REQUIRE(WaitUntil([&] { return Connected(a); }));
  const v1::Key given_up = DenseKey(20, 64, 64);
  std::vector<v1::Key> keys;
  for (int i = 0; i < 9; ++i) keys.push_back(DenseKey(21 + i, 64, 64));
  stall();
  const auto start = Steady::now();
  const ClaimAnswers first = ClaimsUnder(a, {given_up}, 300);
  CHECK(first.deadline_exceeded == 1);
  const ClaimAnswers nine = ClaimsUnder(a, keys, 2000);
  INFO("other errors: " << (nine.errors.empty() ? "" : nine.errors.front()));
  CHECK(nine.granted == 9);
  // Long after any bound on the fleet claim (the statement timeout is 5 s),
  // the Claim whose caller gave up still holds nothing.
  std::this_thread::sleep_until(start + std::chrono::seconds(7));
  CHECK_FALSE(HasClaim(a, given_up));
  CHECK(Status(a).claims_size() == 9);
  CHECK(Status(a).fleet().local_only_claims() >= 9);
  unstall();
  REQUIRE(WaitUntil([&] { return Connected(a); }));
  // The link comes back: fleet claims again (a new key each try: a key
  // granted locally meanwhile stays claimed).
  uint32_t next = 40;
  REQUIRE(WaitUntil(
      [&] {
        return ClaimKey(a, DenseKey(next++, 64, 64)).outcome() ==
                   v1::CLAIM_OUTCOME_GRANTED &&
               pg.QueryNumber(db,
                              "SELECT count(*) FROM fleet_claims WHERE "
                              "NOT released") >= 1;
      },
      20));
}

}  // namespace

TEST_CASE(
    "while a table lock stalls fleet claims, a Claim whose caller gave up is "
    "never granted, and Claims are decided locally within a client's default "
    "deadline") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("locked");
  PGconn* locker = nullptr;
  ClaimsWhilePostgresStalls(
      pg, "locked", conninfo,
      [&] {
        locker = PQconnectdb(pg.ConnInfo("locked").c_str());
        REQUIRE(PQstatus(locker) == CONNECTION_OK);
        PGresult* r = PQexec(
            locker, "BEGIN; LOCK TABLE fleet_claims IN ACCESS EXCLUSIVE MODE");
        INFO(PQerrorMessage(locker));
        REQUIRE(PQresultStatus(r) == PGRES_COMMAND_OK);
        PQclear(r);
      },
      [&] {
        PQfinish(locker);  // the lock goes with the session
        locker = nullptr;
      });
  if (locker != nullptr) PQfinish(locker);
}

namespace {

// A TCP proxy on 127.0.0.1 to PostgreSQL's unix socket that holds every
// chunk of bytes, either way, for `delay` before passing it on: a network
// that is slow, not down.
class DelayProxy {
 public:
  explicit DelayProxy(std::string unix_path)
      : unix_path_(std::move(unix_path)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) ==
            0);
    REQUIRE(listen(listener_, 16) == 0);
    socklen_t len = sizeof(addr);
    getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    threads_.emplace_back([this] { AcceptLoop(); });
  }
  ~DelayProxy() {
    stop_ = true;
    shutdown(listener_, SHUT_RDWR);
    for (std::thread& t : threads_) t.join();
    close(listener_);
  }
  int port() const { return port_; }
  void set_delay(std::chrono::milliseconds d) { delay_ms_ = d.count(); }

 private:
  void AcceptLoop() {
    std::vector<std::thread> pumps;
    while (!stop_) {
      pollfd fd = {listener_, POLLIN, 0};
      if (poll(&fd, 1, 100) <= 0) continue;
      const int client = accept(listener_, nullptr, nullptr);
      if (client < 0) continue;
      const int server = socket(AF_UNIX, SOCK_STREAM, 0);
      sockaddr_un addr{};
      addr.sun_family = AF_UNIX;
      std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s",
                    unix_path_.c_str());
      if (connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
          0) {
        close(client);
        close(server);
        continue;
      }
      // Each pump closes its write side when its read side ends; the last
      // one of a pair closes both sockets.
      auto pair = std::make_shared<std::atomic<int>>(2);
      auto done = [client, server, pair] {
        if (--*pair == 0) {
          close(client);
          close(server);
        }
      };
      pumps.emplace_back([this, client, server, done] {
        Pump(client, server);
        done();
      });
      pumps.emplace_back([this, client, server, done] {
        Pump(server, client);
        done();
      });
    }
    for (std::thread& t : pumps) t.join();
  }
  void Pump(int from, int to) {
    char buf[16384];
    while (!stop_) {
      pollfd fd = {from, POLLIN, 0};
      const int n = poll(&fd, 1, 100);
      if (n == 0) continue;
      if (n < 0) break;
      const ssize_t got = read(from, buf, sizeof(buf));
      if (got <= 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_.load()));
      ssize_t sent = 0;
      while (sent < got) {
        const ssize_t w = send(to, buf + sent, got - sent, MSG_NOSIGNAL);
        if (w <= 0) break;
        sent += w;
      }
      if (sent < got) break;
    }
    shutdown(to, SHUT_WR);
    shutdown(from, SHUT_RD);
  }

  const std::string unix_path_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> delay_ms_{0};
  std::vector<std::thread> threads_;
};

}  // namespace

TEST_CASE(
    "while PostgreSQL is stopped (SIGSTOP), a Claim whose caller gave up is "
    "never granted, and Claims are decided locally within a client's default "
    "deadline") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  const std::string conninfo = pg.CreateDatabase("stopped");
  bool paused = false;
  ClaimsWhilePostgresStalls(
      pg, "stopped", conninfo,
      [&] {
        pg.Pause();
        paused = true;
      },
      [&] {
        pg.Resume();
        paused = false;
      });
  if (paused) pg.Resume();  // a failed REQUIRE above: the server must stop
}

TEST_CASE(
    "behind a network that delays every byte by 3 s, a Claim whose caller "
    "gave up is never granted, and Claims are decided locally within a "
    "client's default deadline") {
  GPUTUNE_REQUIRE_POSTGRES();
  PostgresServer pg;
  pg.CreateDatabase("slow");
  DelayProxy proxy(pg.socket_dir() + "/.s.PGSQL.5432");
  const std::string conninfo =
      "host=127.0.0.1 port=" + std::to_string(proxy.port()) +
      " dbname=slow user=postgres password=" + PostgresServer::kPassword;
  ClaimsWhilePostgresStalls(
      pg, "slow", conninfo,
      [&] { proxy.set_delay(std::chrono::milliseconds(3000)); },
      [&] { proxy.set_delay(std::chrono::milliseconds(0)); });
}

}  // namespace gputune
