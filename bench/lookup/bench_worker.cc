#include "bench/lookup/bench_worker.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>

#include "absl/strings/str_cat.h"
#include "echo.grpc.pb.h"
#include "gputune/client.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/key_format.h"

namespace gputune::bench {
namespace {

double CpuSeconds() {
  struct rusage u = {};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec +
         u.ru_stime.tv_usec * 1e-6;
}

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

absl::StatusOr<std::vector<v1::Key>> ReadKeys(const std::string& path) {
  std::ifstream in(path);
  std::vector<v1::Key> keys;
  std::string line;
  while (std::getline(in, line)) {
    absl::StatusOr<v1::Key> key = ParseKeyText(line);
    if (!key.ok()) return key.status();
    keys.push_back(*key);
  }
  if (keys.empty()) return absl::NotFoundError("no keys in " + path);
  return keys;
}

// One call of the chosen kind on key i; false on an error.
using Call = std::function<bool(const v1::Key& key)>;

absl::StatusOr<Call> LookupCall(const WorkerArgs& args) {
  ClientOptions options;
  options.endpoint = args.endpoint;
  options.memo_capacity = 0;  // every Lookup is an RPC
  options.lookup_deadline = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Client>> created = Client::Create(options);
  if (!created.ok()) return created.status();
  std::shared_ptr<Client> client = std::move(*created);
  return Call([client](const v1::Key& key) {
    absl::StatusOr<LookupResult> r = client->Lookup(key);
    return r.ok() && r->hit();
  });
}

// The echo client is built like the library's: same channel arguments, a
// generated stub, a deadline per call, and as many bytes each way as a
// Lookup of the first key moves.
absl::StatusOr<Call> EchoCall(const WorkerArgs& args,
                              const std::vector<v1::Key>& keys,
                              const std::string& lookup_endpoint) {
  auto channel = grpc::CreateCustomChannel(
      args.endpoint, grpc::InsecureChannelCredentials(),
      ChannelArgumentsFor(ClientOptions{}));
  std::shared_ptr<Echo::Stub> stub = Echo::NewStub(channel);
  v1::LookupRequest lookup_request;
  *lookup_request.mutable_key() = keys[0];
  size_t reply_size = 200;
  {
    auto lookup = v1::TuneService::NewStub(grpc::CreateCustomChannel(
        lookup_endpoint, grpc::InsecureChannelCredentials(),
        ChannelArgumentsFor(ClientOptions{})));
    grpc::ClientContext ctx;
    v1::LookupResponse response;
    if (lookup->Lookup(&ctx, lookup_request, &response).ok()) {
      reply_size = response.ByteSizeLong();
    }
  }
  auto request = std::make_shared<EchoRequest>();
  request->set_payload(std::string(lookup_request.ByteSizeLong(), 'k'));
  request->set_reply_size(static_cast<uint32_t>(reply_size));
  return Call([stub, request](const v1::Key&) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(5));
    EchoReply reply;
    return stub->Echo(&ctx, *request, &reply).ok();
  });
}

// What a process does without a daemon: its own connection to the database
// file, a prepared SELECT of the key's row, the row's summary parsed and its
// candidate set and device checked.
absl::StatusOr<Call> SqliteCall(const WorkerArgs& args) {
  sqlite3* raw = nullptr;
  if (sqlite3_open_v2(args.db.c_str(), &raw,
                      SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat("cannot open ", args.db));
  }
  std::shared_ptr<sqlite3> db(raw, sqlite3_close);
  sqlite3_stmt* st = nullptr;
  if (sqlite3_prepare_v2(db.get(),
                         "SELECT summary, candidate_set, fingerprint FROM "
                         "entries WHERE key_id = ?1",
                         -1, &st, nullptr) != SQLITE_OK) {
    return absl::InternalError(sqlite3_errmsg(db.get()));
  }
  std::shared_ptr<sqlite3_stmt> stmt(st, sqlite3_finalize);
  const std::string digest = args.fingerprint;
  return Call([db, stmt, digest](const v1::Key& key) {
    const std::string id = KeyId(key);
    sqlite3_stmt* s = stmt.get();
    sqlite3_bind_text(s, 1, id.data(), static_cast<int>(id.size()),
                      SQLITE_STATIC);
    bool hit = false;
    if (sqlite3_step(s) == SQLITE_ROW) {
      v1::Entry entry;
      const bool parsed = entry.ParseFromArray(sqlite3_column_blob(s, 0),
                                               sqlite3_column_bytes(s, 0));
      const char* cs = reinterpret_cast<const char*>(sqlite3_column_text(s, 1));
      const char* fp = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
      hit = parsed && cs != nullptr && key.candidate_set() == cs &&
            fp != nullptr && digest == fp;
    }
    sqlite3_reset(s);
    return hit;
  });
}

}  // namespace

const char* ModeName(Mode mode) {
  switch (mode) {
    case Mode::kLookup:
      return "lookup";
    case Mode::kEcho:
      return "echo";
    case Mode::kSqlite:
      return "sqlite";
  }
  return "?";
}

bool ParseMode(const std::string& name, Mode* mode) {
  for (Mode m : {Mode::kLookup, Mode::kEcho, Mode::kSqlite}) {
    if (name == ModeName(m)) {
      *mode = m;
      return true;
    }
  }
  return false;
}

int RunWorker(const WorkerArgs& args) {
  absl::StatusOr<std::vector<v1::Key>> keys = ReadKeys(args.keys_file);
  if (!keys.ok()) {
    std::cerr << "worker: " << keys.status() << "\n";
    return 1;
  }
  absl::StatusOr<Call> call = args.mode == Mode::kLookup ? LookupCall(args)
                              : args.mode == Mode::kEcho
                                  ? EchoCall(args, *keys, args.daemon)
                                  : SqliteCall(args);
  if (!call.ok()) {
    std::cerr << "worker: " << call.status() << "\n";
    return 1;
  }
  size_t next = args.seed % keys->size();
  auto key = [&]() -> const v1::Key& {
    const v1::Key& k = (*keys)[next];
    next = (next + 1) % keys->size();
    return k;
  };
  for (int i = 0; i < 200; ++i) (*call)(key());  // connect, warm caches
  const char ready = 'r';
  if (write(args.ready_fd, &ready, 1) != 1) return 1;
  char buf;
  while (read(args.go_fd, &buf, 1) > 0) {
  }
  Samples samples;
  samples.latency_ns.reserve(200000);
  const double cpu_start = CpuSeconds();
  const int64_t end = NowNs() + static_cast<int64_t>(args.seconds * 1e9);
  for (int64_t start = NowNs(); start < end;) {
    const bool ok = (*call)(key());
    const int64_t done = NowNs();
    if (ok) {
      samples.latency_ns.push_back(
          static_cast<uint32_t>(std::min<int64_t>(done - start, UINT32_MAX)));
    } else {
      ++samples.errors;
    }
    start = done;
  }
  samples.cpu_seconds = CpuSeconds() - cpu_start;
  std::ofstream out(args.out, std::ios::binary);
  const uint64_t header[2] = {samples.errors, samples.latency_ns.size()};
  out.write(reinterpret_cast<const char*>(header), sizeof(header));
  out.write(reinterpret_cast<const char*>(&samples.cpu_seconds),
            sizeof(samples.cpu_seconds));
  out.write(reinterpret_cast<const char*>(samples.latency_ns.data()),
            static_cast<std::streamsize>(samples.latency_ns.size() *
                                         sizeof(uint32_t)));
  return out ? 0 : 1;
}

absl::StatusOr<Samples> ReadSamples(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t header[2] = {0, 0};
  if (!in.read(reinterpret_cast<char*>(header), sizeof(header))) {
    return absl::NotFoundError("no samples in " + path);
  }
  Samples s;
  s.errors = header[0];
  in.read(reinterpret_cast<char*>(&s.cpu_seconds), sizeof(s.cpu_seconds));
  s.latency_ns.resize(header[1]);
  in.read(reinterpret_cast<char*>(s.latency_ns.data()),
          static_cast<std::streamsize>(header[1] * sizeof(uint32_t)));
  if (!in) return absl::DataLossError("short samples file " + path);
  return s;
}

}  // namespace gputune::bench
