// Restart with a large cache: how long until gputuned serves, and its RSS.
//
//   gputune_restart_bench [--entries=100000] [--json=FILE]
//
// Writes N realistic entries (8 candidate measurements each, as a CUDA tune
// records) straight into a fresh database with TuneStore, then starts the
// gputuned binary on it and measures the time from exec to the first
// answered GetStatus, and VmRSS/VmHWM after 1000 lookups. The targets of
// docs/design.md ("Targets"): serving within 1 s and RSS at most 64 MiB at
// 100k entries.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "proto/proto_time.h"
#include "storage/tune_store.h"

namespace {

gputune::v1::Key KeyFor(int i) {
  gputune::v1::Key key;
  auto* d = key.mutable_dense_bf16();
  d->set_phase(i % 2 ? gputune::v1::PHASE_DECODE : gputune::v1::PHASE_PREFILL);
  d->set_role("layer" + std::to_string(i % 97) + ".mlp");
  d->set_tokens(1 + i % 4096);
  d->set_input_features(4096 + 64 * (i / 4096));
  d->set_output_features(6144);
  key.set_candidate_set("cs1");
  return key;
}

gputune::v1::Execution Algo(int algo) {
  gputune::v1::Execution e;
  e.set_kernel("cublaslt");
  auto& p = *e.mutable_params();
  p["algo_id"] = algo;
  p["tile"] = 20;
  p["stages"] = 8;
  p["splitk"] = 1;
  p["reduction_scheme"] = 0;
  p["swizzle"] = 0;
  p["custom_option"] = 0;
  p["cluster_shape"] = 2;
  e.set_workspace_bytes(1 << 20);
  return e;
}

// VmRSS, VmHWM and RssAnon of pid in KiB.
struct Memory {
  long rss = 0, hwm = 0, anon = 0;
};
Memory Rss(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  Memory m;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) m.rss = std::atol(line.c_str() + 6);
    if (line.rfind("VmHWM:", 0) == 0) m.hwm = std::atol(line.c_str() + 6);
    if (line.rfind("RssAnon:", 0) == 0) m.anon = std::atol(line.c_str() + 8);
  }
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  int n = 100000;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--entries=", 0) == 0) n = std::atoi(a.c_str() + 10);
    if (a.rfind("--json=", 0) == 0) json = a.substr(7);
  }
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("gputune-restart-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string db = dir + "/d.db";
  {
    gputune::storage::OpenReport report;
    auto store = gputune::storage::TuneStore::Open({db, false}, &report);
    if (!store.ok()) return 1;
    gputune::v1::Fingerprint fp;
    fp.set_backend("host");  // another device: entries load as STALE, as after
                             // a driver upgrade
    fp.set_device_name("bench");
    std::vector<gputune::v1::Entry> batch;
    for (int i = 0; i < n; ++i) {
      gputune::v1::Entry& e = batch.emplace_back();
      *e.mutable_key() = KeyFor(i);
      *e.mutable_execution() = Algo(i % 40);
      for (int c = 0; c < 8; ++c) {
        auto* m = e.add_measurements();
        *m->mutable_execution() = Algo(c);
        m->set_validation(gputune::v1::VALIDATION_PASSED);
        *m->mutable_median() = gputune::SecondsToProto(1e-5 * (c + 1));
        *m->mutable_spread() = gputune::SecondsToProto(1e-7);
        m->set_samples(50);
      }
      e.set_source(gputune::v1::SOURCE_DAEMON_MEASURED);
      *e.mutable_fingerprint() = fp;
      if (batch.size() == 5000) {
        if (!(*store)->PutAll(batch).ok()) return 1;
        batch.clear();
      }
    }
    if (!batch.empty() && !(*store)->PutAll(batch).ok()) return 1;
  }
  const uint64_t db_bytes = std::filesystem::file_size(db);

  const std::string ep = "unix://" + dir + "/d.sock";
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    freopen((dir + "/log").c_str(), "w", stderr);
    execl(GPUTUNED_PATH, GPUTUNED_PATH, "--backend=host",
          ("--listen=" + ep).c_str(), ("--db=" + db).c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  auto connect = [&] {
    return gputune::v1::TuneService::NewStub(
        grpc::CreateChannel(ep, grpc::InsecureChannelCredentials()));
  };
  double serving_s = -1;
  gputune::v1::GetStatusResponse status;
  for (int i = 0; i < 3000; ++i) {
    // A fresh channel per try: a failed connect would otherwise put the
    // channel into gRPC's reconnect backoff and measure that instead.
    auto stub = connect();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(200));
    if (stub->GetStatus(&ctx, {}, &status).ok()) {
      serving_s = std::chrono::duration<double>(
                      std::chrono::steady_clock::now() - start)
                      .count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  auto stub = connect();
  for (int i = 0; i < 1000; ++i) {
    grpc::ClientContext ctx;
    gputune::v1::LookupRequest req;
    *req.mutable_key() = KeyFor(i * 97);
    gputune::v1::LookupResponse resp;
    stub->Lookup(&ctx, req, &resp);
  }
  const Memory mem = Rss(pid);
  kill(pid, SIGTERM);
  waitpid(pid, nullptr, 0);
  {
    std::ifstream log(dir + "/log");
    std::string line;
    while (std::getline(log, line)) {
      if (line.find("indexed in") != std::string::npos) {
        std::printf("daemon: %s\n", line.c_str());
      }
    }
  }
  std::filesystem::remove_all(dir);

  std::printf(
      "entries %d (db %.1f MiB): serving after %.3f s (target <= 1 s), "
      "RSS %.1f MiB (anonymous %.1f MiB), peak %.1f MiB; daemon "
      "counted %llu entries\n",
      n, db_bytes / 1048576.0, serving_s, mem.rss / 1024.0, mem.anon / 1024.0,
      mem.hwm / 1024.0, static_cast<unsigned long long>(status.entries()));
  if (!json.empty()) {
    std::ofstream(json) << "{\"entries\": " << n
                        << ", \"serving_s\": " << serving_s
                        << ", \"rss_kib\": " << mem.rss
                        << ", \"anon_kib\": " << mem.anon
                        << ", \"peak_rss_kib\": " << mem.hwm << "}\n";
  }
  return serving_s >= 0 && status.entries() == static_cast<uint64_t>(n) ? 0 : 1;
}
