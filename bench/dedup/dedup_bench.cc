// The headline: N processes asking for the same K new dense keys cost K
// benchmark jobs through gputuned, against N x K when every process tunes for
// itself (what TunableOp or Triton's autotuner do), with the same engine.
//
//   gputune_dedup_bench [--keys=4] [--procs=1,4,16] [--budget_ms=200]
//                       [--json=FILE]
//
// For each N: (a) N forked processes each send TuneDense(wait=true) for the
// K keys at once (one thread per key) to one daemon on the host backend;
// jobs = the daemon's jobs_completed delta; wall = first request to the last
// HIT. (b) N forked processes each run kernels::TuneDense on the HostBackend
// for every key, as a per-process autotuner would; jobs = N x K.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "kernels/engine.h"
#include "kernels/host/host_backend.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  int keys = 4;
  std::vector<int> procs = {1, 4, 16};
  int budget_ms = 200;
  std::string json;
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("keys")) {
      o.keys = std::atoi(v);
    } else if (const char* v = value("budget_ms")) {
      o.budget_ms = std::atoi(v);
    } else if (const char* v = value("json")) {
      o.json = v;
    } else if (const char* v = value("procs")) {
      o.procs.clear();
      for (const char* p = v; *p;) {
        o.procs.push_back(std::atoi(p));
        while (*p && *p != ',') ++p;
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

// The K keys of round `round`: decode shapes, new to the daemon.
gputune::v1::Key KeyFor(int round, int i) {
  gputune::v1::Key key;
  auto* d = key.mutable_dense_bf16();
  d->set_phase(gputune::v1::PHASE_DECODE);
  d->set_role("bench.r" + std::to_string(round));
  d->set_tokens(1 + i % 4);
  d->set_input_features(256 * (1 + i / 4));
  d->set_output_features(512);
  key.set_candidate_set("bench");
  return key;
}

gputune::kernels::DenseShape ShapeOf(const gputune::v1::Key& key) {
  const auto& d = key.dense_bf16();
  return {d.tokens(), d.output_features(), d.input_features()};
}

std::unique_ptr<gputune::v1::TuneService::Stub> Stub(const std::string& ep) {
  return gputune::v1::TuneService::NewStub(
      grpc::CreateChannel(ep, grpc::InsecureChannelCredentials()));
}

uint64_t JobsCompleted(const std::string& ep) {
  grpc::ClientContext ctx;
  gputune::v1::GetStatusResponse status;
  if (!Stub(ep)->GetStatus(&ctx, {}, &status).ok()) {
    std::fprintf(stderr, "GetStatus failed\n");
    std::exit(1);
  }
  return status.jobs_completed();
}

// Forks n children running fn(child); returns the wall time until all exit.
template <typename Fn>
double ForkAll(int n, Fn fn) {
  const auto start = Clock::now();
  std::vector<pid_t> pids;
  for (int c = 0; c < n; ++c) {
    const pid_t pid = fork();
    if (pid == 0) _exit(fn(c));
    pids.push_back(pid);
  }
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  if (!ok) {
    std::fprintf(stderr, "a child process failed\n");
    std::exit(1);
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = Parse(argc, argv);
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("gputune-dedup-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const std::string ep = "unix://" + dir + "/d.sock";
  const std::string budget = std::to_string(opt.budget_ms) + "ms";

  // One daemon, host backend, same budget as the per-process runs.
  const pid_t daemon = fork();
  if (daemon == 0) {
    freopen((dir + "/gputuned.log").c_str(), "w", stderr);
    execl(GPUTUNED_PATH, GPUTUNED_PATH, "--backend=host",
          ("--listen=" + ep).c_str(), ("--db=" + dir + "/d.db").c_str(),
          ("--tune_budget=" + budget).c_str(), "--autotune_log=disabled",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 200 && !std::filesystem::exists(dir + "/d.sock"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }

  gputune::kernels::TuneOptions tune;
  tune.budget_seconds = opt.budget_ms / 1000.0;
  tune.log = gputune::kernels::AutotuneLog::kDisabled;

  std::printf("%-6s %-5s | %-12s %-10s | %-12s %-10s | %s\n", "procs", "keys",
              "daemon jobs", "wall s", "per-proc jobs", "wall s", "speed-up");
  std::string json = "{\"keys\": " + std::to_string(opt.keys) +
                     ", \"budget_ms\": " + std::to_string(opt.budget_ms) +
                     ", \"rounds\": [";
  int round = 0;
  for (int n : opt.procs) {
    ++round;
    const uint64_t before = JobsCompleted(ep);
    const double daemon_wall = ForkAll(n, [&](int) {
      auto stub = Stub(ep);
      std::vector<std::thread> asks;
      std::atomic<int> hits{0};
      for (int k = 0; k < opt.keys; ++k) {
        asks.emplace_back([&, k] {
          grpc::ClientContext ctx;
          ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::minutes(5));
          gputune::v1::TuneDenseRequest req;
          *req.mutable_key() = KeyFor(round, k);
          req.set_wait(true);
          gputune::v1::TuneDenseResponse resp;
          if (stub->TuneDense(&ctx, req, &resp).ok() &&
              resp.status().state() == gputune::v1::KEY_STATE_HIT) {
            ++hits;
          }
        });
      }
      for (auto& t : asks) t.join();
      return hits == opt.keys ? 0 : 1;
    });
    const uint64_t daemon_jobs = JobsCompleted(ep) - before;

    const double local_wall = ForkAll(n, [&](int) {
      gputune::kernels::HostBackend backend;
      for (int k = 0; k < opt.keys; ++k) {
        if (!gputune::kernels::TuneDense(backend, ShapeOf(KeyFor(round, k)),
                                         tune)
                 .status.ok()) {
          return 1;
        }
      }
      return 0;
    });
    const int local_jobs = n * opt.keys;
    std::printf("%-6d %-5d | %-12llu %-10.2f | %-12d %-10.2f | %.1fx\n", n,
                opt.keys, static_cast<unsigned long long>(daemon_jobs),
                daemon_wall, local_jobs, local_wall, local_wall / daemon_wall);
    std::fflush(stdout);
    json += std::string(round > 1 ? ", " : "") +
            "{\"procs\": " + std::to_string(n) +
            ", \"daemon_jobs\": " + std::to_string(daemon_jobs) +
            ", \"daemon_wall_s\": " + std::to_string(daemon_wall) +
            ", \"per_process_jobs\": " + std::to_string(local_jobs) +
            ", \"per_process_wall_s\": " + std::to_string(local_wall) + "}";
    if (daemon_jobs != static_cast<uint64_t>(opt.keys)) {
      std::fprintf(stderr, "FAIL: %d processes x %d keys ran %llu jobs\n", n,
                   opt.keys, static_cast<unsigned long long>(daemon_jobs));
    }
  }
  json += "]}\n";
  if (!opt.json.empty()) std::ofstream(opt.json) << json;
  kill(daemon, SIGTERM);
  waitpid(daemon, nullptr, 0);
  std::filesystem::remove_all(dir);
  return 0;
}
