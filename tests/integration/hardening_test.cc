// gputuned against hostile and unlucky clients, from other processes: a
// connection flood, a second daemon on the same database, damaged rows,
// malformed and out-of-range requests, users without authority.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "tests/support/answered_status.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"
#include "tests/support/sanitized.h"

namespace gputune {
namespace {

using testing::AnsweredStatus;
using testing::Ctx;
using testing::DaemonProcess;
using testing::DenseKey;
using testing::RssKiB;
using testing::RunProgram;

// A channel of its own (not sharing a connection with other channels).
std::shared_ptr<grpc::Channel> FreshChannel(const DaemonProcess& d) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(d.endpoint(),
                                   grpc::InsecureChannelCredentials(), args);
}

grpc::Status GetStatus(v1::TuneService::Stub& stub, v1::GetStatusResponse* resp,
                       int seconds = 10) {
  return stub.GetStatus(Ctx(seconds).get(), v1::GetStatusRequest(), resp);
}

uint64_t ClaimId(v1::TuneService::Stub& stub, const v1::Key& key) {
  v1::ClaimRequest req;
  *req.mutable_key() = key;
  req.set_holder("hardening test");
  v1::ClaimResponse resp;
  const grpc::Status s = stub.Claim(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  REQUIRE(resp.outcome() == v1::CLAIM_OUTCOME_GRANTED);
  return resp.claim().claim_id();
}

void RecordKey(v1::TuneService::Stub& stub, const v1::Key& key,
               const std::string& kernel) {
  v1::RecordRequest req;
  req.set_claim_id(ClaimId(stub, key));
  req.mutable_execution()->set_kernel(kernel);
  v1::RecordResponse resp;
  const grpc::Status s = stub.Record(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
}

// Imports entries for DenseKey(1..count), each with `data_bytes` of data,
// 50 to a request.
void ImportKeys(v1::TuneService::Stub& stub, uint32_t count,
                size_t data_bytes) {
  for (uint32_t first = 1; first <= count; first += 50) {
    v1::ImportEntriesRequest import;
    for (uint32_t m = first; m < first + 50 && m <= count; ++m) {
      v1::Entry* e = import.add_entries();
      *e->mutable_key() = DenseKey(m);
      e->mutable_execution()->set_kernel("k");
      e->mutable_execution()->set_data(std::string(data_bytes, 'd'));
    }
    v1::ImportEntriesResponse imported;
    const grpc::Status s = stub.ImportEntries(Ctx().get(), import, &imported);
    INFO(s.error_message());
    REQUIRE(s.ok());
  }
}

v1::KeyState LookupState(v1::TuneService::Stub& stub, const v1::Key& key) {
  v1::LookupRequest req;
  *req.mutable_key() = key;
  v1::LookupResponse resp;
  const grpc::Status s = stub.Lookup(Ctx().get(), req, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp.status().state();
}

// A unary call with raw request bytes, to any method.
grpc::Status CallRaw(const DaemonProcess& d, const std::string& method,
                     const std::string& request) {
  grpc::GenericStub stub(d.Channel());
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1), out;
  auto ctx = Ctx();
  std::promise<grpc::Status> done;
  stub.UnaryCall(ctx.get(), method, grpc::StubOptions(), &in, &out,
                 [&](grpc::Status s) { done.set_value(std::move(s)); });
  return done.get_future().get();
}

// Runs sql on the database file (the daemon may be running: WAL allows it).
void Sql(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &handle) == SQLITE_OK);
  sqlite3_busy_timeout(handle, 5000);
  char* error = nullptr;
  const int rc = sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, &error);
  INFO((error ? error : ""));
  sqlite3_free(error);
  sqlite3_close(handle);
  REQUIRE(rc == SQLITE_OK);
}

// Opens a unix connection to path and returns its descriptor (-1 on
// failure).
int ConnectUnix(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// An HTTP/2 client written by hand: on a unix connection of its own it sends
// `streams` gRPC calls of `method` with the serialized `request` (HTTP/2
// streams 1, 3, 5, ...) and never reads.
// It grants no flow-control window beyond HTTP/2's initial 64 KiB, so the
// answer stays with the daemon, as with an asker that stopped reading.
// Returns the descriptor (closing it cancels the calls), or -1.
int SendAndNeverRead(const std::string& socket_path, const std::string& method,
                     const std::string& request, uint32_t streams = 1) {
  // Within the daemon's initial connection window, in `streams` streams
  // (1, 3, 5, ...), the same request on each.
  REQUIRE((request.size() + 5 + 9) * streams < 65535);
  std::string out = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  auto frame = [&out](uint8_t type, uint8_t flags, uint32_t stream,
                      const std::string& payload) {
    const uint32_t n = static_cast<uint32_t>(payload.size());
    const char header[9] = {static_cast<char>(n >> 16),
                            static_cast<char>(n >> 8),
                            static_cast<char>(n),
                            static_cast<char>(type),
                            static_cast<char>(flags),
                            static_cast<char>(stream >> 24),
                            static_cast<char>(stream >> 16),
                            static_cast<char>(stream >> 8),
                            static_cast<char>(stream)};
    out.append(header, sizeof(header));
    out += payload;
  };
  frame(0x4, 0, 0, "");    // SETTINGS: the defaults
  frame(0x4, 0x1, 0, "");  // ACK of the daemon's, which it sends first
  std::string headers;     // HPACK literals without indexing, new names
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{
           {":method", "POST"},
           {":scheme", "http"},
           {":path", method},
           {":authority", "localhost"},
           {"content-type", "application/grpc"},
           {"te", "trailers"}}) {
    REQUIRE(name.size() < 127);
    REQUIRE(value.size() < 127);
    headers += '\0';
    headers += static_cast<char>(name.size());
    headers += name;
    headers += static_cast<char>(value.size());
    headers += value;
  }
  const uint32_t n = static_cast<uint32_t>(request.size());
  std::string message = {0, static_cast<char>(n >> 24),
                         static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                         static_cast<char>(n)};
  message += request;
  for (uint32_t i = 0; i < streams; ++i) {
    const uint32_t stream = 1 + 2 * i;
    frame(0x1, 0x4, stream, headers);  // HEADERS, END_HEADERS
    for (size_t at = 0; at < message.size(); at += 16384) {
      const bool last = at + 16384 >= message.size();
      frame(0x0, last ? 0x1 : 0, stream, message.substr(at, 16384));  // DATA
    }
  }
  const int fd = ConnectUnix(socket_path);
  if (fd < 0) return -1;
  for (size_t at = 0; at < out.size();) {
    // A daemon that closes the connection is not a signal to die of.
    const ssize_t w = send(fd, out.data() + at, out.size() - at, MSG_NOSIGNAL);
    if (w <= 0) {
      close(fd);
      return -1;
    }
    at += static_cast<size_t>(w);
  }
  return fd;
}

// `connections` connections to `d`, each sending `streams` calls of
// `request` to `method` and never reading; their descriptors.
std::vector<int> OpenUnread(const DaemonProcess& d, const std::string& method,
                            const std::string& request, int connections,
                            uint32_t streams) {
  std::vector<int> fds;
  for (int c = 0; c < connections; ++c) {
    const int fd = SendAndNeverRead(d.socket_path(), method, request, streams);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
  }
  return fds;
}

// `call()` until it is OK, every 100 ms for up to 5 s; its last status.
template <typename F>
grpc::Status UntilOk(F call) {
  grpc::Status s = call();
  for (int i = 0; i < 50 && !s.ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    s = call();
  }
  return s;
}

// The largest RSS of `pid` over the next 4 s (sampled every 100 ms), and
// at least `floor`.
int64_t PeakRssKiB(pid_t pid, int64_t floor) {
  int64_t peak = floor;
  for (int i = 0; i < 40; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    peak = std::max(peak, RssKiB(pid));
  }
  return peak;
}

void LimitFiles1024() {
  rlimit limit{1024, 1024};
  setrlimit(RLIMIT_NOFILE, &limit);
}

}  // namespace

TEST_CASE(
    "a flood of connections past the descriptor limit never wedges the "
    "daemon, and established clients keep working through it") {
  // What systemd gives a service by default, hard limit included: raising
  // the soft limit does not help here, the accept loop must.
  DaemonProcess d({"--backend=none"}, {}, LimitFiles1024);
  auto established = v1::TuneService::NewStub(FreshChannel(d));
  AnsweredStatus(*established);

  std::vector<int> flood;
  for (int i = 0; i < 1100; ++i) {
    const int fd = ConnectUnix(d.socket_path());
    if (fd >= 0) flood.push_back(fd);
  }
  CHECK(flood.size() >= 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // During the flood: the connection made before it still works.
  v1::GetStatusResponse during;
  const grpc::Status s = GetStatus(*established, &during, 5);
  INFO(s.error_message());
  CHECK(s.ok());
  for (int fd : flood) close(fd);

  // Once it is over: new connections are served again.
  bool served = false;
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!served && std::chrono::steady_clock::now() < give_up) {
    auto fresh = v1::TuneService::NewStub(FreshChannel(d));
    v1::GetStatusResponse after;
    served = GetStatus(*fresh, &after, 2).ok();
  }
  INFO(d.Log());
  CHECK(served);
  CHECK(d.Log().find("Failed accept4") == std::string::npos);
}

TEST_CASE(
    "a second daemon on the same database or socket refuses to start, "
    "naming the first one's pid, and leaves it serving") {
  DaemonProcess first({"--backend=none"});
  const std::string log = first.dir() + "/second.log";
  SECTION("same database, another socket") {
    const pid_t second = testing::SpawnGputuned(
        {"--listen=unix://" + first.dir() + "/other.sock",
         "--db=" + first.db_path(), "--backend=none"},
        {}, log);
    int status = 0;
    REQUIRE(waitpid(second, &status, 0) == second);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
    CHECK_FALSE(std::filesystem::exists(first.dir() + "/other.sock"));
  }
  SECTION("same socket, another database") {
    const pid_t second = testing::SpawnGputuned(
        {"--listen=" + first.endpoint(), "--db=" + first.dir() + "/other.db",
         "--backend=none"},
        {}, log);
    int status = 0;
    REQUIRE(waitpid(second, &status, 0) == second);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) != 0);
  }
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  INFO(text);
  CHECK(text.find("pid " + std::to_string(first.pid())) != std::string::npos);
  // The first one's socket is still there and answers.
  REQUIRE(std::filesystem::exists(first.socket_path()));
  AnsweredStatus(*v1::TuneService::NewStub(FreshChannel(first)));
}

TEST_CASE("the locks of a daemon killed with kill -9 do not stop the next") {
  DaemonProcess d({"--backend=none"});
  d.Kill();
  d.Start();  // throws when it does not serve
  AnsweredStatus(*d.Stub());
}

TEST_CASE(
    "the database, its lock and the socket are not world-readable, whatever "
    "the umask") {
  DaemonProcess d({"--backend=none"}, {}, [] { umask(0); });
  RecordKey(*d.Stub(), DenseKey(1), "k");
  for (const std::string& path :
       {d.db_path(), d.db_path() + "-wal", d.db_path() + ".lock"}) {
    struct stat st {};
    REQUIRE(stat(path.c_str(), &st) == 0);
    INFO(path << " mode " << std::oct << (st.st_mode & 0777));
    CHECK((st.st_mode & 0007) == 0);
  }
  struct stat st {};
  REQUIRE(stat(d.socket_path().c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0660);
}

TEST_CASE(
    "claim ids keep increasing across a restart that lost the database's "
    "WAL") {
  DaemonProcess d({"--backend=none"});
  const uint64_t before = ClaimId(*d.Stub(), DenseKey(1));
  d.Kill();
  std::filesystem::remove(d.db_path() + "-wal");
  std::filesystem::remove(d.db_path() + "-shm");
  d.Start();
  const uint64_t after = ClaimId(*d.Stub(), DenseKey(2));
  CHECK(after > before);
}

TEST_CASE(
    "a damaged row is quarantined at load, is a MISS, can be tuned again, "
    "and the others are served") {
  DaemonProcess d({"--backend=none"});
  for (uint32_t m : {1, 2, 3}) RecordKey(*d.Stub(), DenseKey(m), "k");
  REQUIRE(d.Terminate() == 0);
  // What lookups serve (the summary) damaged: found while the index loads.
  Sql(d.db_path(), "UPDATE entries SET summary = X'0aff' WHERE key_id = '" +
                       KeyId(DenseKey(2)) + "'");
  d.Start();
  auto stub = d.Stub();
  const v1::GetStatusResponse status = AnsweredStatus(*stub);
  CHECK(status.entries() == 2);
  CHECK(status.quarantined_entries() == 1);
  REQUIRE(status.quarantined_key_ids_size() == 1);
  CHECK(status.quarantined_key_ids(0) == KeyId(DenseKey(2)));
  CHECK(LookupState(*stub, DenseKey(1)) == v1::KEY_STATE_HIT);
  CHECK(LookupState(*stub, DenseKey(2)) == v1::KEY_STATE_MISS);
  CHECK(LookupState(*stub, DenseKey(3)) == v1::KEY_STATE_HIT);
  v1::ListEntriesResponse list;
  REQUIRE(stub->ListEntries(Ctx().get(), v1::ListEntriesRequest(), &list).ok());
  CHECK(list.entries_size() == 2);
  // Kept for inspection.
  Sql(d.db_path(),
      "SELECT 1 FROM quarantine WHERE key_id = '" + KeyId(DenseKey(2)) + "'");
  RecordKey(*stub, DenseKey(2), "again");
  CHECK(LookupState(*stub, DenseKey(2)) == v1::KEY_STATE_HIT);

  std::string out;
  CHECK(RunProgram(GPUTUNECTL_PATH, {"--endpoint=" + d.endpoint(), "status"},
                   &out) == 0);
  CHECK(out.find("DAMAGED") != std::string::npos);
}

TEST_CASE(
    "a row damaged while the daemon runs is skipped by ListEntries, which "
    "says so, and by export") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  for (uint32_t m : {1, 2, 3}) RecordKey(*stub, DenseKey(m), "k");
  Sql(d.db_path(), "UPDATE entries SET entry = X'0aff' WHERE key_id = '" +
                       KeyId(DenseKey(3)) + "'");
  const std::string file = d.dir() + "/export.jsonl";
  std::string out;
  CHECK(RunProgram(GPUTUNECTL_PATH,
                   {"--endpoint=" + d.endpoint(), "export", file}, &out) == 0);
  INFO(out);
  CHECK(out.find("exported 2 entries") != std::string::npos);
  CHECK(out.find("skipped 1 damaged") != std::string::npos);
  CHECK(LookupState(*stub, DenseKey(3)) == v1::KEY_STATE_MISS);
  CHECK(AnsweredStatus(*stub).quarantined_entries() == 1);
  v1::ListEntriesResponse list;
  REQUIRE(stub->ListEntries(Ctx().get(), v1::ListEntriesRequest(), &list).ok());
  CHECK(list.entries_size() == 2);
}

TEST_CASE(
    "a database whose entries table is foreign is quarantined, not fatal") {
  DaemonProcess d({"--backend=none"});
  d.Kill();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::filesystem::remove(d.db_path() + suffix);
  }
  Sql(d.db_path(),
      "CREATE TABLE entries (x INTEGER); INSERT INTO entries "
      "VALUES (1);");
  d.Start();
  const v1::GetStatusResponse status = AnsweredStatus(*d.Stub());
  CHECK_FALSE(status.database_quarantined_to().empty());
  RecordKey(*d.Stub(), DenseKey(1), "k");
}

TEST_CASE(
    "export fails loudly, leaving no file, when it cannot write everything") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  ImportKeys(*stub, 50, 4000);
  const std::string file = d.dir() + "/export.jsonl";
  std::string out;
  // A full disk, as the file-size limit makes it (EFBIG, not SIGXFSZ).
  const int code =
      RunProgram(GPUTUNECTL_PATH,
                 {"--endpoint=" + d.endpoint(), "export", file}, &out, [] {
                   signal(SIGXFSZ, SIG_IGN);
                   rlimit limit{64 * 1024, 64 * 1024};
                   setrlimit(RLIMIT_FSIZE, &limit);
                 });
  INFO(out);
  CHECK(code != 0);
  CHECK_FALSE(std::filesystem::exists(file));
  CHECK_FALSE(std::filesystem::exists(file + ".partial"));
  CHECK(out.find("exported 50 entries") == std::string::npos);
  // Without the limit it works, and the file reads back.
  CHECK(RunProgram(GPUTUNECTL_PATH,
                   {"--endpoint=" + d.endpoint(), "export", file}, &out) == 0);
  CHECK(out.find("exported 50 entries") != std::string::npos);
}

TEST_CASE(
    "askers that never read large answers do not grow the daemon past a "
    "bound, and it goes on answering") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  // 700 HIT keys whose entries carry the largest data: a BatchLookup of all
  // of them answers about 45 MiB, within the answer bound (48 MiB).
  constexpr uint32_t kKeys = 700;
  ImportKeys(*stub, kKeys, 64 * 1024);
  v1::BatchLookupRequest batch;
  for (uint32_t m = 1; m <= kKeys; ++m) *batch.add_keys() = DenseKey(m);
  // A reader as the client library is: it takes answers up to 64 MiB.
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  auto reader = v1::TuneService::NewStub(grpc::CreateCustomChannel(
      d.endpoint(), grpc::InsecureChannelCredentials(), args));
  auto batch_lookup = [&] {
    v1::BatchLookupResponse resp;
    const grpc::Status s = reader->BatchLookup(Ctx(30).get(), batch, &resp);
    INFO(s.error_message());
    if (s.ok()) CHECK(resp.ByteSizeLong() > size_t{40} << 20);
    return s;
  };
  REQUIRE(batch_lookup().ok());  // read: whole, and it fits
  const std::string request = batch.SerializeAsString();
  const int64_t before = RssKiB(d.pid());
  REQUIRE(before > 0);
  // Unbounded (before the answer budget), these 24 took gputuned from 117 to
  // 1,304 MiB.
  constexpr int kCalls = 24;
  const std::vector<int> fds =
      OpenUnread(d, "/gputune.v1.TuneService/BatchLookup", request, kCalls, 1);
  int64_t peak = PeakRssKiB(d.pid(), before);
  // While they are pending: small calls are answered, a reader's large
  // answer waits for room (RESOURCE_EXHAUSTED).
  AnsweredStatus(*stub);
  CHECK(LookupState(*stub, DenseKey(1)) == v1::KEY_STATE_HIT);
  const grpc::Status held = batch_lookup();
  INFO(held.error_message());
  CHECK(held.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  peak = std::max(peak, RssKiB(d.pid()));
  std::printf(
      "RSS of gputuned with %d unread BatchLookups of %zu keys pending: "
      "%lld KiB before, %lld KiB at most while pending (+%lld KiB)\n",
      kCalls, static_cast<size_t>(kKeys), static_cast<long long>(before),
      static_cast<long long>(peak), static_cast<long long>(peak - before));
  // The answers held for them are at most 256 MiB (kAnswerMemoryBytes), plus
  // what is being built at the moment.
  CHECK(peak - before < int64_t{256 + 128} << 10);
  // Once the askers go away, their room is free again.
  for (int fd : fds) close(fd);
  const grpc::Status again = UntilOk(batch_lookup);
  INFO(again.error_message());
  CHECK(again.ok());
}

TEST_CASE(
    "Watch streams that are never read stay within a bound, and the daemon "
    "goes on answering and watching") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  // A HIT whose entry carries the largest data: its Watch message is
  // larger than the window an asker that never reads grants.
  ImportKeys(*stub, 1, 64 * 1024);
  v1::WatchRequest watch;
  *watch.mutable_key() = DenseKey(1);
  const std::string request = watch.SerializeAsString();
  const int64_t before = RssKiB(d.pid());
  REQUIRE(before > 0);
  // 64 connections of 128 Watch streams each (kMaxStreamsPerConnection),
  // twice kMaxWatchStreams in all. Without the cap and the answer budget
  // these grew gputuned by 660 MiB, and with no limit per connection
  // either, 100 connections of 1,363 streams each took it from 25 MiB to
  // 8.0 GiB.
  const uint32_t per_connection = 128;  // kMaxStreamsPerConnection
  const std::vector<int> fds = OpenUnread(d, "/gputune.v1.TuneService/Watch",
                                          request, 64, per_connection);
  int64_t peak = PeakRssKiB(d.pid(), before);
  // Meanwhile small answers go out as ever (the HIT's, 64 KiB, waits for
  // room in the answer budget), and a new Watch is refused.
  AnsweredStatus(*stub);
  CHECK(LookupState(*stub, DenseKey(2)) == v1::KEY_STATE_MISS);
  auto read_watch = [&] {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(10));
    auto reader = stub->Watch(&ctx, watch);
    v1::WatchResponse message;
    const bool got = reader->Read(&message);
    const grpc::Status s = reader->Finish();
    INFO(s.error_message());
    return got && message.status().state() == v1::KEY_STATE_HIT
               ? grpc::Status::OK
               : s;
  };
  const grpc::Status held = read_watch();
  INFO(held.error_message());
  CHECK(held.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  peak = std::max(peak, RssKiB(d.pid()));
  std::printf(
      "RSS of gputuned with %u unread Watch streams asked on each of 64 "
      "connections: %lld KiB before, %lld KiB at most (+%lld KiB)\n",
      per_connection, static_cast<long long>(before),
      static_cast<long long>(peak), static_cast<long long>(peak - before));
  // kMaxWatchStreams calls (~18 KiB each in gRPC) and the answer budget
  // (256 MiB) for their messages. (Under AddressSanitizer the same took
  // 854 MiB: its redzones and quarantine on many small allocations.)
#ifndef GPUTUNE_SANITIZED
  CHECK(peak - before < int64_t{448} << 10);
#endif
  for (int fd : fds) close(fd);
  const grpc::Status again = UntilOk(read_watch);
  INFO(again.error_message());
  CHECK(again.ok());
}

TEST_CASE(
    "Backup writes a verified new file and never writes through an existing "
    "name or a dangling symlink") {
  DaemonProcess d({"--backend=none"});
  RecordKey(*d.Stub(), DenseKey(1), "k");
  auto admin = d.AdminStub();
  const std::string copy = d.dir() + "/copy.db";
  v1::BackupRequest req;
  req.set_path(copy);
  v1::BackupResponse resp;
  REQUIRE(admin->Backup(Ctx().get(), req, &resp).ok());
  CHECK(resp.bytes() == std::filesystem::file_size(copy));
  struct stat st {};
  REQUIRE(stat(copy.c_str(), &st) == 0);
  CHECK((st.st_mode & 0007) == 0);
  Sql(copy, "SELECT key_id FROM entries");

  CHECK(admin->Backup(Ctx().get(), req, &resp).error_code() ==
        grpc::StatusCode::ALREADY_EXISTS);
  const std::string link = d.dir() + "/link.db";
  const std::string target = d.dir() + "/target.db";
  REQUIRE(symlink(target.c_str(), link.c_str()) == 0);
  req.set_path(link);
  CHECK(admin->Backup(Ctx().get(), req, &resp).error_code() ==
        grpc::StatusCode::ALREADY_EXISTS);
  CHECK_FALSE(std::filesystem::exists(target));
}

TEST_CASE(
    "on a full disk Record and ImportEntries are RESOURCE_EXHAUSTED, lookups "
    "go on, and what was acknowledged stays") {
  DaemonProcess d({"--backend=none"});
  ImportKeys(*d.Stub(), 50, 8000);
  REQUIRE(d.Terminate() == 0);
  // As the soak makes a full disk: no file the daemon writes grows past
  // 256 KiB (EFBIG), the database (over 400 KB) is read as before.
  d.child_setup() = [] {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{256 * 1024, 256 * 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
  };
  d.Start();
  auto stub = d.Stub();
  std::vector<uint32_t> acked;
  int refused = 0;
  for (uint32_t m = 1000; m < 1100; ++m) {
    v1::RecordRequest record;
    record.set_claim_id(ClaimId(*stub, DenseKey(m)));
    record.mutable_execution()->set_kernel("k");
    v1::RecordResponse recorded;
    grpc::Status s = stub->Record(Ctx().get(), record, &recorded);
    INFO(s.error_message());
    if (s.ok()) {
      acked.push_back(m);
    } else {
      ++refused;
      CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
    }
    v1::ImportEntriesRequest import;
    v1::Entry* e = import.add_entries();
    *e->mutable_key() = DenseKey(m + 1000);
    e->mutable_execution()->set_kernel("k");
    v1::ImportEntriesResponse imported;
    s = stub->ImportEntries(Ctx().get(), import, &imported);
    CHECK((s.ok() || s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED));
  }
  CHECK(refused > 50);
  CHECK(LookupState(*stub, DenseKey(7)) == v1::KEY_STATE_HIT);
  AnsweredStatus(*stub);
  REQUIRE(d.Terminate() == 0);
  d.child_setup() = {};
  d.Start();
  stub = d.Stub();
  for (uint32_t m : acked) {
    CHECK(LookupState(*stub, DenseKey(m)) == v1::KEY_STATE_HIT);
  }
}

TEST_CASE(
    "Backup to a full disk fails loudly, keeps no file, and gputunectl "
    "backup exits non-zero") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  ImportKeys(*stub, 50, 8000);
  REQUIRE(d.Terminate() == 0);  // checkpointed into the database file
  // A full disk, as the file-size limit makes it for the daemon (EFBIG, not
  // SIGXFSZ): no file it writes grows past 128 KiB, and a copy of the
  // database (over 400 KB) cannot be written.
  constexpr rlim_t kLimit = 128 * 1024;
  REQUIRE(std::filesystem::file_size(d.db_path()) > 3 * kLimit);
  d.child_setup() = [] {
    signal(SIGXFSZ, SIG_IGN);
    rlimit limit{kLimit, kLimit};
    setrlimit(RLIMIT_FSIZE, &limit);
  };
  d.Start();
  stub = d.Stub();
  CHECK(LookupState(*stub, DenseKey(7)) == v1::KEY_STATE_HIT);
  const std::string copy = d.dir() + "/copy.db";
  v1::BackupRequest req;
  req.set_path(copy);
  v1::BackupResponse resp;
  const grpc::Status s = d.AdminStub()->Backup(Ctx().get(), req, &resp);
  INFO(s.error_message());
  CHECK(s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED);
  CHECK(s.error_message().find("nothing was kept") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(copy));
  std::string out;
  const std::string by_cli = d.dir() + "/cli.db";
  const int code = RunProgram(
      GPUTUNECTL_PATH, {"--endpoint=" + d.endpoint(), "backup", by_cli}, &out);
  INFO(out);
  CHECK(code != 0);
  CHECK(out.find("backed up") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(by_cli));
  // Lookups go on, and with room again the same backup works.
  CHECK(LookupState(*stub, DenseKey(8)) == v1::KEY_STATE_HIT);
  REQUIRE(d.Terminate() == 0);
  d.child_setup() = {};
  d.Start();
  CHECK(RunProgram(GPUTUNECTL_PATH,
                   {"--endpoint=" + d.endpoint(), "backup", by_cli},
                   &out) == 0);
  CHECK(out.find("backed up") != std::string::npos);
  Sql(by_cli, "SELECT key_id FROM entries");
}

TEST_CASE(
    "a request that does not parse is INVALID_ARGUMENT saying so, for every "
    "method") {
  DaemonProcess d({"--backend=none"});
  // Field 2 of every request below is a string, or a message whose field 2
  // is; 0xff is never valid UTF-8. For GetStatus (no fields): a truncated
  // varint.
  const std::string bad_string = std::string("\x12\x02\xff\xfe", 4);
  const std::vector<std::pair<std::string, std::string>> calls = {
      {"/gputune.v1.TuneService/Claim", bad_string},
      {"/gputune.v1.TuneService/Renew", std::string("\x08", 1)},
      {"/gputune.v1.TuneService/Record",
       std::string("\x12\x03\x0a\x01\xff", 5)},
      {"/gputune.v1.TuneService/Abandon", bad_string},
      {"/gputune.v1.TuneService/ListEntries", std::string("\x1a\x01\xff", 3)},
      {"/gputune.v1.TuneService/GetEntry",
       std::string("\x0a\x03\x1a\x01\xff", 5)},
      {"/gputune.v1.TuneService/DeleteEntries",
       std::string("\x0a\x03\x1a\x01\xff", 5)},
      {"/gputune.v1.TuneService/ImportEntries",
       std::string("\x0a\x03\x52\x01\xff", 5)},
      {"/gputune.v1.TuneService/GetStatus", std::string("\x08\xff", 2)},
      {"/gputune.v1.TuneService/TuneDense",
       std::string("\x0a\x03\x1a\x01\xff", 5)},
      {"/gputune.v1.AdminService/Backup", std::string("\x0a\x01\xff", 3)},
      {"/gputune.v1.AdminService/SetLogLevel", std::string("\x0a\x01\xff", 3)},
  };
  for (const auto& [method, bytes] : calls) {
    const grpc::Status s = CallRaw(d, method, bytes);
    INFO(method << ": " << s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message().find("could not be parsed") != std::string::npos);
  }
  // Watch and SubscribeChanges are streams: the same answer when they end.
  // (SubscribeChanges: a truncated varint.)
  for (const auto& [method, bytes] :
       std::vector<std::pair<std::string, std::string>>{
           {"/gputune.v1.TuneService/Watch",
            std::string("\x0a\x03\x1a\x01\xff", 5)},
           {"/gputune.v1.TuneService/SubscribeChanges",
            std::string("\x10", 1)}}) {
    INFO(method);
    grpc::GenericStub generic(d.Channel());
    auto ctx = Ctx();
    grpc::CompletionQueue cq;
    auto stream = generic.PrepareCall(ctx.get(), method, &cq);
    void* tag = nullptr;
    bool ok = false;
    stream->StartCall(reinterpret_cast<void*>(1));
    REQUIRE(cq.Next(&tag, &ok));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer request(&slice, 1);
    stream->WriteLast(request, grpc::WriteOptions(),
                      reinterpret_cast<void*>(2));
    REQUIRE(cq.Next(&tag, &ok));
    grpc::Status finished;
    stream->Finish(&finished, reinterpret_cast<void*>(3));
    REQUIRE(cq.Next(&tag, &ok));
    CHECK(finished.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(finished.error_message().find("could not be parsed") !=
          std::string::npos);
  }
  // protobuf's complaint is logged, but at most once a second.
  for (int i = 0; i < 20; ++i) {
    CallRaw(d, "/gputune.v1.TuneService/Claim", bad_string);
  }
  const std::string log = d.Log();
  size_t lines = 0;
  for (size_t at = log.find("invalid UTF-8"); at != std::string::npos;
       at = log.find("invalid UTF-8", at + 1)) {
    ++lines;
  }
  CHECK(lines < 10);
}

TEST_CASE(
    "out-of-range durations and timestamps, bad page tokens and bad log "
    "levels are INVALID_ARGUMENT naming the field, and change nothing") {
  DaemonProcess d({"--backend=none"});
  auto stub = d.Stub();
  auto admin = d.AdminStub();
  const uint64_t claim = ClaimId(*stub, DenseKey(1));
  struct Case {
    std::string name;
    std::function<grpc::Status()> call;
    std::string field;
  };
  auto claim_with_ttl = [&](int64_t seconds, int32_t nanos) {
    return [&stub, seconds, nanos] {
      v1::ClaimRequest req;
      *req.mutable_key() = DenseKey(5);
      req.set_holder("p");
      req.mutable_ttl()->set_seconds(seconds);
      req.mutable_ttl()->set_nanos(nanos);
      v1::ClaimResponse resp;
      return stub->Claim(Ctx().get(), req, &resp);
    };
  };
  auto record = [&](std::function<void(v1::RecordRequest&)> edit) {
    return [&stub, claim, edit] {
      v1::RecordRequest req;
      req.set_claim_id(claim);
      req.mutable_execution()->set_kernel("k");
      edit(req);
      v1::RecordResponse resp;
      return stub->Record(Ctx().get(), req, &resp);
    };
  };
  auto import = [&](std::function<void(v1::Entry&)> edit) {
    return [&stub, edit] {
      v1::ImportEntriesRequest req;
      v1::Entry* e = req.add_entries();
      *e->mutable_key() = DenseKey(9);
      e->mutable_execution()->set_kernel("k");
      edit(*e);
      v1::ImportEntriesResponse resp;
      return stub->ImportEntries(Ctx().get(), req, &resp);
    };
  };
  auto list = [&](const std::string& token) {
    return [&stub, token] {
      v1::ListEntriesRequest req;
      req.set_page_token(token);
      v1::ListEntriesResponse resp;
      return stub->ListEntries(Ctx().get(), req, &resp);
    };
  };
  auto log_level = [&](const std::string& level, const std::string& autotune) {
    return [&admin, level, autotune] {
      v1::SetLogLevelRequest req;
      req.set_level(level);
      req.set_autotune_log(autotune);
      v1::SetLogLevelResponse resp;
      return admin->SetLogLevel(Ctx().get(), req, &resp);
    };
  };
  const std::vector<Case> cases = {
      {"claim ttl nanos out of range", claim_with_ttl(1, 2000000000), "ttl"},
      {"claim ttl signs differ", claim_with_ttl(1, -5), "ttl"},
      {"claim ttl past protobuf's range", claim_with_ttl(400000000000, 0),
       "ttl"},
      {"renew ttl nanos out of range",
       [&] {
         v1::RenewRequest req;
         req.set_claim_id(claim);
         req.mutable_ttl()->set_nanos(-1500000000);
         v1::RenewResponse resp;
         return stub->Renew(Ctx().get(), req, &resp);
       },
       "ttl"},
      {"record chosen_time nanos 1.5e9",
       record([](auto& r) { r.mutable_chosen_time()->set_nanos(1500000000); }),
       "chosen_time"},
      {"record default_time negative",
       record([](auto& r) { r.mutable_default_time()->set_seconds(-1); }),
       "default_time"},
      {"record measurement median out of range", record([](auto& r) {
         auto* m = r.add_measurements();
         m->mutable_execution()->set_kernel("k");
         m->mutable_median()->set_seconds(int64_t{1} << 50);
       }),
       "measurements[0].median"},
      {"record measurement error too long", record([](auto& r) {
         auto* m = r.add_measurements();
         m->mutable_execution()->set_kernel("k");
         m->set_error(std::string(2000, 'e'));
       }),
       "measurements[0].error"},
      {"record data too large", record([](auto& r) {
         r.mutable_execution()->set_data(std::string(70000, 'd'));
       }),
       "execution.data"},
      {"record of more than 1 MiB", record([](auto& r) {
         for (int i = 0; i < 20; ++i) {
           auto* m = r.add_measurements();
           m->mutable_execution()->set_kernel("k");
           m->mutable_execution()->set_data(std::string(60000, 'd'));
         }
       }),
       "request"},
      {"import measured_at in year -290e9", import([](auto& e) {
         e.mutable_measured_at()->set_seconds(-290000000000LL * 31556952LL /
                                              1000);
       }),
       "entries[0].measured_at"},
      {"import measured_at nanos negative",
       import([](auto& e) { e.mutable_measured_at()->set_nanos(-1); }),
       "entries[0].measured_at"},
      {"import chosen_time out of range",
       import([](auto& e) { e.mutable_chosen_time()->set_nanos(1000000000); }),
       "entries[0].chosen_time"},
      {"import 10 MB recorded_by",
       import([](auto& e) { e.set_recorded_by(std::string(10 << 20, 'r')); }),
       "entries[0].recorded_by"},
      {"import recorded_by with an ANSI escape",
       import([](auto& e) { e.set_recorded_by("a\x1b[31mred"); }),
       "entries[0].recorded_by"},
      {"import 1 MB fingerprint field", import([](auto& e) {
         e.mutable_fingerprint()->set_device_name(std::string(1 << 20, 'f'));
       }),
       "entries[0].fingerprint.device_name"},
      {"import fingerprint build too long", import([](auto& e) {
         e.mutable_fingerprint()->set_build(std::string(300, 'b'));
       }),
       "entries[0].fingerprint.build"},
      {"import measurement error too long", import([](auto& e) {
         auto* m = e.add_measurements();
         m->mutable_execution()->set_kernel("k");
         m->set_error(std::string(5000, 'e'));
       }),
       "entries[0].measurements[0].error"},
      {"claim holder too long",
       [&] {
         v1::ClaimRequest req;
         *req.mutable_key() = DenseKey(6);
         req.set_holder(std::string(300, 'h'));
         v1::ClaimResponse resp;
         return stub->Claim(Ctx().get(), req, &resp);
       },
       "holder"},
      {"claim holder with a newline",
       [&] {
         v1::ClaimRequest req;
         *req.mutable_key() = DenseKey(6);
         req.set_holder("a\nfake log line");
         v1::ClaimResponse resp;
         return stub->Claim(Ctx().get(), req, &resp);
       },
       "holder"},
      {"abandon reason too long",
       [&] {
         v1::AbandonRequest req;
         req.set_claim_id(claim);
         req.set_reason(std::string(2000, 'r'));
         v1::AbandonResponse resp;
         return stub->Abandon(Ctx().get(), req, &resp);
       },
       "reason"},
      {"forged page token", list("1AAAAAAAAAAAAAAA"), "page_token"},
      {"SQL page token", list("' OR 1=1; DROP TABLE entries; --"),
       "page_token"},
      {"raw key id as page token", list(KeyId(DenseKey(1))), "page_token"},
      {"10 MB page token", list(std::string(10 << 20, 'A')), "page_token"},
      {"log level fine, autotune log bad", log_level("error", "max"),
       "autotune_log"},
      {"log level bad", log_level("loud", "full"), "level"},
      {"backup to a relative path",
       [&] {
         v1::BackupRequest req;
         req.set_path("relative.db");
         v1::BackupResponse resp;
         return admin->Backup(Ctx().get(), req, &resp);
       },
       "path"},
      {"backup path too long",
       [&] {
         v1::BackupRequest req;
         req.set_path("/" + std::string(5000, 'p'));
         v1::BackupResponse resp;
         return admin->Backup(Ctx().get(), req, &resp);
       },
       "path"},
  };
  for (const Case& c : cases) {
    const grpc::Status s = c.call();
    INFO(c.name << ": " << s.error_code() << " " << s.error_message());
    CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK(s.error_message().rfind(c.field, 0) == 0);
  }
  // Nothing changed: no entry, the one claim, the log levels as they were.
  const v1::GetStatusResponse after = AnsweredStatus(*stub);
  CHECK(after.entries() == 0);
  CHECK(after.claims_size() == 1);
  v1::SetLogLevelResponse levels;
  REQUIRE(
      admin->SetLogLevel(Ctx().get(), v1::SetLogLevelRequest(), &levels).ok());
  CHECK(levels.level() == "info");
  CHECK(levels.autotune_log() == "minimal");
  // A token the daemon made pages on.
  for (uint32_t m = 10; m < 13; ++m) RecordKey(*stub, DenseKey(m), "k");
  v1::ListEntriesRequest page_req;
  page_req.set_page_size(2);
  v1::ListEntriesResponse page;
  REQUIRE(stub->ListEntries(Ctx().get(), page_req, &page).ok());
  REQUIRE_FALSE(page.next_page_token().empty());
  page_req.set_page_token(page.next_page_token());
  REQUIRE(stub->ListEntries(Ctx().get(), page_req, &page).ok());
  CHECK(page.entries_size() == 1);
}

TEST_CASE(
    "another user may look up and claim but not make operator calls, nor "
    "touch a claim that is not theirs") {
  DaemonProcess d({"--backend=none", "--socket_mode=0666"});
  REQUIRE(chmod(d.dir().c_str(), 0755) == 0);
  auto stub = d.Stub();
  const uint64_t mine = ClaimId(*stub, DenseKey(1));
  RecordKey(*stub, DenseKey(2), "k");
  auto as_nobody = [] {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(99);
  };
  auto ctl = [&](std::vector<std::string> args, std::string* out) {
    args.insert(args.begin(), "--endpoint=" + d.endpoint());
    return RunProgram(GPUTUNECTL_PATH, args, out, as_nobody);
  };
  std::string out;
  if (getuid() != 0) {
    WARN("skipped: needs root to run a client as another user");
    return;
  }
  REQUIRE(ctl({"status"}, &out) == 0);  // anyone may read
  CHECK(ctl({"delete", "--all", "--yes"}, &out) != 0);
  CHECK(out.find("operator") != std::string::npos);
  CHECK(ctl({"log-level", "off"}, &out) != 0);
  CHECK(ctl({"backup", d.dir() + "/nobody.db"}, &out) != 0);
  CHECK_FALSE(std::filesystem::exists(d.dir() + "/nobody.db"));
  CHECK(ctl({"abandon", std::to_string(mine)}, &out) != 0);
  CHECK(out.find("belongs to another") != std::string::npos);
  // Nothing changed.
  const v1::GetStatusResponse after = AnsweredStatus(*stub);
  CHECK(after.entries() == 1);
  CHECK(after.claims_size() == 1);
  // The operator (root here) may abandon a stuck claim.
  std::string root_out;
  CHECK(RunProgram(
            GPUTUNECTL_PATH,
            {"--endpoint=" + d.endpoint(), "abandon", std::to_string(mine)},
            &root_out) == 0);
}

TEST_CASE("a TCP listener on a non-loopback address needs TLS or a flag") {
  DaemonProcess d({"--backend=none"});
  const std::string log = d.dir() + "/tcp.log";
  const pid_t refused = testing::SpawnGputuned(
      {"--listen=0.0.0.0:0", "--db=" + d.dir() + "/tcp.db", "--backend=none"},
      {}, log);
  int status = 0;
  REQUIRE(waitpid(refused, &status, 0) == refused);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) != 0);
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  CHECK(text.find("not a loopback address") != std::string::npos);
}

}  // namespace gputune

namespace gputune {
namespace {

// GetStatus of the daemon at `target`, retried for up to 20 s while it
// starts. The channel reconnects every 100 ms (its connect timeout stays
// gRPC's 20 s, so a TLS handshake has time): with gRPC's default backoff
// (1 s, growing by 1.6x) a daemon that came up after the first attempt,
// as a TLS daemon under the sanitizers on a loaded machine does, is only
// tried again seconds later.
grpc::Status WaitForStatus(
    const std::string& target,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    v1::GetStatusResponse* resp, pid_t daemon) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 100);
  auto stub = v1::TuneService::NewStub(
      grpc::CreateCustomChannel(target, credentials, args));
  grpc::Status s;
  for (int i = 0; i < 100; ++i) {
    s = GetStatus(*stub, resp, 1);
    if (s.ok()) return s;
    if (waitpid(daemon, nullptr, WNOHANG) == daemon) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the daemon exited");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return s;
}

// A daemon serving TCP on a port the kernel chose.
struct TcpDaemon {
  pid_t pid = -1;  // -1 when the daemon exited (and was reaped)
  int port = 0;
  grpc::Status status;
  v1::GetStatusResponse answer;
  std::string log;
};

// Starts gputuned with `args_for(0)`, so that the kernel picks a free port
// as the daemon binds it (a port a test found free and passed on could be
// taken in between: the suites run side by side, and the Redis and fleet
// tests open thousands of connections), reads the port from the daemon's
// "serving on <host>:<port>" line, and waits for its GetStatus at
// `host`:port.
TcpDaemon ServeOnAnyPort(
    const std::function<std::vector<std::string>(int)>& args_for,
    const std::string& log, const std::string& host,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials) {
  TcpDaemon d;
  d.pid = testing::SpawnGputuned(args_for(0), {}, log);
  const std::regex serving(" serving on [^ ]*:([0-9]+) ");
  std::smatch m;
  for (int i = 0; i < 600 && d.port == 0; ++i) {
    d.log = testing::ReadFile(log);
    if (std::regex_search(d.log, m, serving)) {
      d.port = std::stoi(m[1].str());
    } else if (waitpid(d.pid, nullptr, WNOHANG) == d.pid) {
      d.pid = -1;
      d.status = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                              "the daemon exited before serving");
      return d;
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  if (d.port == 0) {
    d.status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            "the daemon did not say where it serves in 60 s");
    return d;
  }
  d.status = WaitForStatus(host + ":" + std::to_string(d.port), credentials,
                           &d.answer, d.pid);
  if (d.status.error_message() == "the daemon exited") d.pid = -1;
  d.log = testing::ReadFile(log);
  return d;
}

}  // namespace

TEST_CASE(
    "on loopback TCP the daemon serves and reports its port, but no peer is "
    "an operator") {
  DaemonProcess d({"--backend=none"});
  const TcpDaemon tcp = ServeOnAnyPort(
      [&](int port) {
        return std::vector<std::string>{
            "--listen=127.0.0.1:" + std::to_string(port),
            "--db=" + d.dir() + "/tcp.db", "--backend=none"};
      },
      d.dir() + "/tcp.log", "127.0.0.1", grpc::InsecureChannelCredentials());
  const std::string address = "127.0.0.1:" + std::to_string(tcp.port);
  INFO(tcp.status.error_message() << "\n" << tcp.log);
  if (!tcp.status.ok()) {
    testing::SignalAndReap(tcp.pid, SIGKILL);
    FAIL("the daemon did not answer on TCP");
  }
  const pid_t pid = tcp.pid;
  CHECK(tcp.answer.listen_address() == address);
  v1::DeleteEntriesRequest all;
  all.set_all(true);
  v1::DeleteEntriesResponse deleted;
  CHECK(v1::TuneService::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))
            ->DeleteEntries(Ctx().get(), all, &deleted)
            .error_code() == grpc::StatusCode::PERMISSION_DENIED);
  testing::SignalAndReap(pid, SIGTERM);
}

TEST_CASE("with TLS files a non-loopback TCP address is served over TLS") {
  DaemonProcess d({"--backend=none"});
  std::string out;
  const std::string cert = d.dir() + "/cert.pem";
  const std::string key = d.dir() + "/key.pem";
  if (RunProgram("/usr/bin/openssl",
                 {"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                  key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                  "-addext", "subjectAltName=DNS:localhost"},
                 &out) != 0) {
    WARN("skipped: openssl could not make a certificate: " << out);
    return;
  }
  std::ifstream in(cert);
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs.assign(std::istreambuf_iterator<char>(in),
                            std::istreambuf_iterator<char>());
  const TcpDaemon tls = ServeOnAnyPort(
      [&](int port) {
        return std::vector<std::string>{
            "--listen=0.0.0.0:" + std::to_string(port),
            "--db=" + d.dir() + "/tls.db", "--backend=none",
            "--tls_cert_file=" + cert, "--tls_key_file=" + key};
      },
      d.dir() + "/tls.log", "localhost", grpc::SslCredentials(ssl));
  INFO(tls.status.error_message() << "\n" << tls.log);
  if (!tls.status.ok()) {
    testing::SignalAndReap(tls.pid, SIGKILL);
    FAIL("the daemon did not answer on TCP");
  }
  const pid_t pid = tls.pid;
  const int port = tls.port;
  // Plain text is not served there.
  v1::GetStatusResponse plain;
  CHECK_FALSE(GetStatus(*v1::TuneService::NewStub(grpc::CreateChannel(
                            "127.0.0.1:" + std::to_string(port),
                            grpc::InsecureChannelCredentials())),
                        &plain, 2)
                  .ok());
  testing::SignalAndReap(pid, SIGTERM);
}

}  // namespace gputune
