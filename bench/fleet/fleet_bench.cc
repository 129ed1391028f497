// The fleet tier, measured: real gputuned processes (host backend) sharing a
// real PostgreSQL 15 server that the bench starts in /tmp (as the tests do).
//
//   gputune_fleet_bench [--daemons=1,3,8] [--keys=4] [--budget_ms=100]
//                       [--warm_entries=100000] [--rate=1000] [--seconds=10]
//                       [--parts=dedup,warm,publish]
//
// dedup:   N daemons of one fingerprint, one client process each, asking
//          TuneDense for the same K new keys: fleet-wide jobs and wall time,
//          against N daemons without a fleet (N x K jobs) and N processes
//          tuning for themselves with the same engine (N x K).
// warm:    a fleet database with `warm_entries` entries; a new daemon joins:
//          time from its start until every entry is in its index, and its
//          RSS then (VmRSS) and at most (VmHWM).
// publish: 3 daemons; client Claim+Record pairs at `rate` per second in all,
//          spread over them, for `seconds`: the rate reached, the largest
//          feed lag any daemon reported while it ran (publish to adoption),
//          and how long after the last acknowledged Record every daemon had
//          every entry.
#include <libpq-fe.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "grpcpp/client_context.h"
#include "kernels/engine.h"
#include "kernels/host/host_backend.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"
#include "tests/support/daemon_process.h"
#include "tests/support/postgres_server.h"

namespace {

using gputune::testing::DaemonProcess;
using gputune::testing::DenseKey;
using gputune::testing::PostgresServer;
namespace v1 = gputune::v1;
using Steady = std::chrono::steady_clock;

struct Options {
  std::vector<int> daemons = {1, 3, 8};
  int keys = 4;
  int budget_ms = 100;
  int warm_entries = 100000;
  int rate = 1000;
  int seconds = 10;
  std::string parts = "dedup,warm,publish";
};

std::vector<int> Ints(const char* v) {
  std::vector<int> out;
  for (const char* p = v; *p;) {
    out.push_back(std::atoi(p));
    while (*p && *p != ',') ++p;
    if (*p == ',') ++p;
  }
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* name) -> const char* {
      const std::string prefix = std::string("--") + name + "=";
      return a.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    if (const char* v = value("daemons")) {
      o.daemons = Ints(v);
    } else if (const char* v = value("keys")) {
      o.keys = std::atoi(v);
    } else if (const char* v = value("budget_ms")) {
      o.budget_ms = std::atoi(v);
    } else if (const char* v = value("warm_entries")) {
      o.warm_entries = std::atoi(v);
    } else if (const char* v = value("rate")) {
      o.rate = std::atoi(v);
    } else if (const char* v = value("seconds")) {
      o.seconds = std::atoi(v);
    } else if (const char* v = value("parts")) {
      o.parts = v;
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      std::exit(2);
    }
  }
  return o;
}

double Since(Steady::time_point t) {
  return std::chrono::duration<double>(Steady::now() - t).count();
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  return ctx;
}

v1::GetStatusResponse Status(const DaemonProcess& d) {
  v1::GetStatusResponse s;
  if (!d.Stub()->GetStatus(Ctx().get(), {}, &s).ok()) {
    std::fprintf(stderr, "GetStatus failed on %s\n", d.endpoint().c_str());
    std::exit(1);
  }
  return s;
}

template <typename Pred>
void WaitFor(const char* what, Pred pred, double seconds = 120) {
  const auto start = Steady::now();
  while (!pred()) {
    if (Since(start) > seconds) {
      std::fprintf(stderr, "timed out waiting for %s\n", what);
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

std::vector<std::string> Flags(const Options& o, const std::string& conninfo) {
  std::vector<std::string> flags = {
      "--backend=host", "--tune_budget=" + std::to_string(o.budget_ms) + "ms",
      "--autotune_log=disabled", "--db_sync_full=false"};
  if (!conninfo.empty()) {
    flags.push_back("--fleet=" + conninfo);
    flags.push_back("--fleet_poll_interval=200ms");
  }
  return flags;
}

// Starts one tune_client per endpoint asking for `keys`; the wall time until
// all exit (exits the bench if one fails).
double RunClients(const std::vector<std::string>& endpoints,
                  const std::vector<std::string>& keys) {
  const auto start = Steady::now();
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (const std::string& endpoint : endpoints) {
    std::vector<std::string> args = {GPUTUNE_FLEET_TUNE_CLIENT, endpoint};
    args.insert(args.end(), keys.begin(), keys.end());
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
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "a client process failed\n");
      std::exit(1);
    }
  }
  return Since(start);
}

void Dedup(const Options& o, PostgresServer& pg) {
  std::printf(
      "\ndedup: N daemons x K=%d keys, one client process per daemon, host "
      "backend, budget %d ms\n",
      o.keys, o.budget_ms);
  std::printf("%-8s | %-11s %-7s | %-11s %-7s | %-11s %-7s\n", "daemons",
              "fleet jobs", "wall s", "alone jobs", "wall s", "procs jobs",
              "wall s");
  for (int n : o.daemons) {
    std::vector<std::string> keys;
    for (int k = 0; k < o.keys; ++k) {
      keys.push_back(std::to_string(1 + k) + "x" +
                     std::to_string(128 * (1 + n)) + "x256");
    }
    auto run = [&](const std::string& conninfo, uint64_t* jobs) {
      std::vector<std::unique_ptr<DaemonProcess>> daemons;
      for (int i = 0; i < n; ++i) {
        daemons.push_back(std::make_unique<DaemonProcess>(Flags(o, conninfo)));
      }
      if (!conninfo.empty()) {
        for (const auto& d : daemons) {
          WaitFor("the fleet link",
                  [&] { return Status(*d).fleet().connected(); });
        }
      }
      std::vector<std::string> endpoints;
      for (const auto& d : daemons) endpoints.push_back(d->endpoint());
      const double wall = RunClients(endpoints, keys);
      *jobs = 0;
      for (const auto& d : daemons) *jobs += Status(*d).jobs_completed();
      return wall;
    };
    uint64_t fleet_jobs = 0, alone_jobs = 0;
    const double fleet_wall =
        run(pg.CreateDatabase("dedup" + std::to_string(n)), &fleet_jobs);
    const double alone_wall = run("", &alone_jobs);
    // N processes each tuning every key themselves (what a per-process
    // autotuner does), with the same engine and budget.
    const auto start = Steady::now();
    std::vector<pid_t> pids;
    std::fflush(nullptr);
    for (int i = 0; i < n; ++i) {
      const pid_t pid = fork();
      if (pid == 0) {
        gputune::kernels::HostBackend backend;
        gputune::kernels::TuneOptions tune;
        tune.budget_seconds = o.budget_ms / 1000.0;
        tune.log = gputune::kernels::AutotuneLog::kDisabled;
        for (int k = 0; k < o.keys; ++k) {
          const gputune::kernels::DenseShape shape{1 + k, 256, 128 * (1 + n)};
          if (!gputune::kernels::TuneDense(backend, shape, tune).status.ok())
            _exit(1);
        }
        _exit(0);
      }
      pids.push_back(pid);
    }
    for (pid_t pid : pids) waitpid(pid, nullptr, 0);
    const double procs_wall = Since(start);
    std::printf("%-8d | %-11llu %-7.2f | %-11llu %-7.2f | %-11d %-7.2f\n", n,
                static_cast<unsigned long long>(fleet_jobs), fleet_wall,
                static_cast<unsigned long long>(alone_jobs), alone_wall,
                n * o.keys, procs_wall);
  }
}

long StatusKb(pid_t pid, const char* field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field, 0) == 0)
      return std::atol(line.c_str() + strlen(field) + 1);
  }
  return -1;
}

std::string Hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

void Warm(const Options& o, PostgresServer& pg) {
  const std::string conninfo = pg.CreateDatabase("warm");
  v1::Fingerprint fp;
  {
    // A daemon makes the schema and tells us the fingerprint entries need.
    DaemonProcess seed(Flags(o, conninfo));
    WaitFor("the fleet link", [&] { return Status(seed).fleet().connected(); });
    fp = Status(seed).fingerprint();
  }
  const std::string digest = gputune::FingerprintDigest(fp);
  const auto fill_start = Steady::now();
  PGconn* conn = PQconnectdb(conninfo.c_str());
  PQclear(PQexec(conn,
                 "COPY fleet_entries (fingerprint, key_id, candidate_set, seq, "
                 "fence, host, gpu, instance, entry) FROM STDIN"));
  std::string chunk;
  for (int i = 0; i < o.warm_entries; ++i) {
    v1::Entry e;
    *e.mutable_key() = DenseKey(1 + i % 16, 256, 256, "cs1",
                                "warm.k" + std::to_string(i / 16));
    e.mutable_execution()->set_kernel("host.blocked");
    (*e.mutable_execution()->mutable_params())["tile_k"] = 256;
    (*e.mutable_execution()->mutable_params())["tile_m"] = 4;
    for (int c = 0; c < 8; ++c) {
      auto* m = e.add_measurements();
      m->mutable_execution()->set_kernel("host.unrolled");
      (*m->mutable_execution()->mutable_params())["unroll"] = c;
      m->set_validation(v1::VALIDATION_PASSED);
      *m->mutable_median() = gputune::SecondsToProto(1e-5 * (c + 1));
      m->set_samples(50);
    }
    e.set_source(v1::SOURCE_DAEMON_MEASURED);
    *e.mutable_fingerprint() = fp;
    chunk += digest + "\t" + gputune::KeyId(e.key()) + "\tcs1\t" +
             std::to_string(i + 1) + "\t0\tbench-host\tbench-gpu\tbench/" +
             std::to_string(i % 8) + "\t\\\\x" + Hex(e.SerializeAsString()) +
             "\n";
    if (chunk.size() > (1 << 20) || i + 1 == o.warm_entries) {
      PQputCopyData(conn, chunk.data(), static_cast<int>(chunk.size()));
      chunk.clear();
    }
  }
  PQputCopyEnd(conn, nullptr);
  PGresult* r = PQgetResult(conn);
  if (PQresultStatus(r) != PGRES_COMMAND_OK) {
    std::fprintf(stderr, "COPY failed: %s\n", PQresultErrorMessage(r));
    std::exit(1);
  }
  PQclear(r);
  PQclear(PQexec(conn, ("SELECT setval('fleet_feed', " +
                        std::to_string(o.warm_entries) + ")")
                           .c_str()));
  // What autovacuum does for a fleet that grew over time.
  PQclear(PQexec(conn, "ANALYZE fleet_entries"));
  PQfinish(conn);
  if (std::getenv("FLEET_BENCH_EXPLAIN") != nullptr) {
    for (const auto& row :
         pg.Query("warm",
                  "EXPLAIN ANALYZE SELECT seq, entry FROM fleet_entries WHERE "
                  "fingerprint = '" +
                      digest + "' AND seq > 50000 ORDER BY seq LIMIT 2000")) {
      std::printf("%s\n", row[0].c_str());
    }
  }
  std::printf("\nwarm start: %d fleet entries (filled in %.1f s)\n",
              o.warm_entries, Since(fill_start));
  const auto start = Steady::now();
  DaemonProcess joiner(Flags(o, conninfo));
  const double serving = Since(start);
  WaitFor("every fleet entry", [&] {
    return Status(joiner).entries() == static_cast<uint64_t>(o.warm_entries);
  });
  const double warm = Since(start);
  std::printf(
      "new daemon: serving after %.3f s, every entry served locally after "
      "%.3f s; RSS %.1f MiB (peak %.1f MiB)\n",
      serving, warm, StatusKb(joiner.pid(), "VmRSS:") / 1024.0,
      StatusKb(joiner.pid(), "VmHWM:") / 1024.0);
  // Once the follower has seen the end of the feed (and handed a large
  // catch-up's transient pages back).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::printf("2 s later: RSS %.1f MiB\n",
              StatusKb(joiner.pid(), "VmRSS:") / 1024.0);
  // And a restart of that daemon, with the entries now local.
  joiner.Terminate();
  const auto restart = Steady::now();
  joiner.Start();
  std::printf("its restart: serving 100%% of them after %.3f s, RSS %.1f MiB\n",
              Since(restart), StatusKb(joiner.pid(), "VmRSS:") / 1024.0);
}

void Publish(const Options& o, PostgresServer& pg) {
  const std::string conninfo = pg.CreateDatabase("publish");
  std::vector<std::unique_ptr<DaemonProcess>> daemons;
  for (int i = 0; i < 3; ++i) {
    daemons.push_back(std::make_unique<DaemonProcess>(Flags(o, conninfo)));
  }
  for (const auto& d : daemons) {
    WaitFor("the fleet link", [&] { return Status(*d).fleet().connected(); });
  }
  const int total = o.rate * o.seconds;
  std::atomic<int> next{0};
  std::atomic<int> failed{0};
  std::atomic<bool> running{true};
  std::atomic<int64_t> max_lag_us{0};
  const auto start = Steady::now();
  // Records paced at `rate`: record i is sent at start + i / rate, by one of
  // 8 threads per daemon (a Record waits on SQLite).
  std::vector<std::thread> senders;
  for (int t = 0; t < 24; ++t) {
    senders.emplace_back([&, t] {
      const DaemonProcess& d = *daemons[t % 3];
      auto stub = d.Stub();
      while (true) {
        const int i = next.fetch_add(1);
        if (i >= total) return;
        std::this_thread::sleep_until(
            start + std::chrono::microseconds(int64_t{1000000} * i / o.rate));
        v1::ClaimRequest claim;
        *claim.mutable_key() =
            DenseKey(1, 256, 256, "cs1", "pub.k" + std::to_string(i));
        claim.set_holder("bench");
        v1::ClaimResponse granted;
        if (!stub->Claim(Ctx().get(), claim, &granted).ok() ||
            granted.outcome() != v1::CLAIM_OUTCOME_GRANTED) {
          ++failed;
          continue;
        }
        v1::RecordRequest req;
        req.set_claim_id(granted.claim().claim_id());
        req.mutable_execution()->set_kernel("host.unrolled");
        v1::RecordResponse resp;
        if (!stub->Record(Ctx().get(), req, &resp).ok()) ++failed;
      }
    });
  }
  std::thread sampler([&] {
    while (running.load()) {
      for (const auto& d : daemons) {
        const int64_t lag = absl::ToInt64Microseconds(
            gputune::FromProto(Status(*d).fleet().feed_lag()));
        int64_t seen = max_lag_us.load();
        while (lag > seen && !max_lag_us.compare_exchange_weak(seen, lag)) {
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  for (auto& t : senders) t.join();
  const double sent = Since(start);
  const auto acked = Steady::now();
  WaitFor("every entry everywhere", [&] {
    for (const auto& d : daemons) {
      const v1::GetStatusResponse s = Status(*d);
      if (s.entries() != static_cast<uint64_t>(total - failed.load()) ||
          s.fleet().outbox_depth() != 0) {
        return false;
      }
    }
    return true;
  });
  const double drain = Since(acked);
  running.store(false);
  sampler.join();
  std::printf(
      "\npublish: %d Claim+Record pairs over 3 daemons at a target of %d/s: "
      "sent in %.2f s (%.0f/s), %d failed; every daemon had every entry %.3f "
      "s after the last acknowledgement; largest feed lag reported %.3f s; "
      "fleet rows %lld\n",
      total, o.rate, sent, total / sent, failed.load(), drain,
      max_lag_us.load() / 1e6,
      pg.QueryNumber("publish", "SELECT count(*) FROM fleet_entries"));
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line: every daemon the bench forks would write a full buffer
  // again.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Options o = Parse(argc, argv);
  if (!PostgresServer::Available()) {
    std::printf("%s\n", PostgresServer::Missing().c_str());
    return 0;
  }
  PostgresServer pg;
  if (o.parts.find("dedup") != std::string::npos) Dedup(o, pg);
  if (o.parts.find("warm") != std::string::npos) Warm(o, pg);
  if (o.parts.find("publish") != std::string::npos) Publish(o, pg);
  return 0;
}
