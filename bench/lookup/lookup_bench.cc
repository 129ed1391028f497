// gputune_lookup_bench: the cost of the lookup path, measured against the
// floor of any gRPC call on this machine.
//
//   gputune_lookup_bench [--entries=10000] [--seconds=1] [--rounds=4]
//                        [--procs=1,8,32] [--batch=10000] [--json=FILE]
//                        [--procs=] (no client processes: memo and batch only)
//                        [--batch_profile_seconds=N] (then BatchLookup back to
//                          back for N s, for a profiler to attach)
//
// Starts gputuned (host backend) on a temporary unix socket and database,
// imports --entries entries, and starts a trivial gRPC echo server built the
// same way (bench/lookup/echo_server.cc). Then it measures, in one run:
//   - memo hits: Client::Lookup of memoised keys (no I/O), ns per call;
//   - BatchLookup of --batch keys until every entry is readable (31 calls
//     back to back, each entry read, before each round
//     of the first --procs count's runs, or --rounds times without any; the
//     median of each round, then over rounds), and the echo server moving
//     the same bytes;
//   - for each process count in --procs: that many client processes (fork +
//     exec of this binary) calling back to back for --seconds, as
//       lookup  Client::Lookup over the unix socket (memo off),
//       echo    the echo server with the same bytes each way,
//       sqlite  no daemon: each process SELECTs the key's row itself;
//     --rounds times, the modes interleaved so that drift (other load on the
//     machine) hits them alike; each figure is the median over the rounds.
// It prints a table with the targets of docs/design.md ("Targets") as ratios
// against the echo and writes the numbers as JSON (--json, default
// lookup_bench.json).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/lookup/bench_worker.h"
#include "bench/lookup/echo_server.h"
#include "echo.grpc.pb.h"
#include "gputune/client.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/channel_arguments.h"
#include "proto/fingerprint.h"
#include "proto/key_format.h"
#include "proto/proto_time.h"

namespace gputune::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct Flags {
  std::map<std::string, std::string> values;
  std::string Get(const std::string& name, const std::string& def) const {
    auto it = values.find(name);
    return it == values.end() ? def : it->second;
  }
  double Number(const std::string& name, double def) const {
    double v = def;
    if (values.count(name) && !absl::SimpleAtod(values.at(name), &v)) {
      std::cerr << "--" << name << ": not a number\n";
      std::exit(2);
    }
    return v;
  }
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) != 0 || a.find('=') == std::string::npos) {
      std::cerr << "usage: gputune_lookup_bench [--entries=N] [--seconds=S] "
                   "[--rounds=R] [--procs=1,8,32] [--batch=N] [--json=FILE]\n";
      std::exit(2);
    }
    const size_t eq = a.find('=');
    f.values[a.substr(2, eq - 2)] = a.substr(eq + 1);
  }
  return f;
}

std::string SelfPath() {
  return std::filesystem::read_symlink("/proc/self/exe").string();
}

// fork + exec; stdout/stderr go to `log` (appended).
pid_t Spawn(const std::vector<std::string>& args, const std::string& log,
            const std::vector<int>& close_in_child = {}) {
  const pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    std::exit(1);
  }
  if (pid == 0) {
    for (int fd : close_in_child) close(fd);
    if (!log.empty()) {
      FILE* f = freopen(log.c_str(), "a", stderr);
      (void)f;
      dup2(STDERR_FILENO, STDOUT_FILENO);
    }
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void Stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
}

// Realistic entries: dense keys over roles and shapes, a cuBLASLt-like
// execution, four measured candidates, stamped with the daemon's device.
std::vector<v1::Entry> MakeEntries(int n, const v1::Fingerprint& fp) {
  static const char* kRoles[] = {"attn.qkv", "attn.out", "mlp.gate_up",
                                 "mlp.down", "lm_head"};
  std::vector<v1::Entry> entries;
  entries.reserve(n);
  for (int i = 0; i < n; ++i) {
    v1::Entry e;
    v1::Key* key = e.mutable_key();
    v1::DenseBf16Key* d = key->mutable_dense_bf16();
    const bool decode = i % 2 == 0;
    d->set_phase(decode ? v1::PHASE_DECODE : v1::PHASE_PREFILL);
    d->set_role(kRoles[i % 5]);
    d->set_tokens(decode ? 1 + (i / 2) % 16 : 32 * (1 + (i / 2) % 256));
    d->set_input_features(1024 * (1 + (i / 512) % 16));
    d->set_output_features(1024 + 128 * (i / 8192));
    key->set_candidate_set("bench-cs1");
    v1::Execution* x = e.mutable_execution();
    x->set_kernel("cublaslt");
    auto& p = *x->mutable_params();
    p["algo_id"] = 6 + i % 20;
    p["tile"] = 20;
    p["stages"] = 8;
    p["splitk"] = 1 + i % 4;
    p["reduction_scheme"] = 1;
    p["swizzle"] = 0;
    x->set_workspace_bytes(1 << 20);
    for (int c = 0; c < 4; ++c) {
      v1::CandidateMeasurement* m = e.add_measurements();
      *m->mutable_execution() = *x;
      (*m->mutable_execution()->mutable_params())["algo_id"] = c;
      m->set_validation(v1::VALIDATION_PASSED);
      m->set_max_abs_error(0.0078125);
      *m->mutable_median() = SecondsToProto(12e-6 + c * 1e-6);
      *m->mutable_spread() = SecondsToProto(0.4e-6);
      m->set_samples(200);
      m->set_is_default(c == 0);
      m->set_chosen(c == 3);
    }
    *e.mutable_default_time() = SecondsToProto(12e-6);
    *e.mutable_chosen_time() = SecondsToProto(10e-6);
    e.set_speedup(1.2);
    e.set_source(v1::SOURCE_DAEMON_MEASURED);
    *e.mutable_measured_at() = ToProto(absl::Now());
    *e.mutable_fingerprint() = fp;
    e.set_recorded_by("gputune_lookup_bench");
    entries.push_back(std::move(e));
  }
  return entries;
}

double Percentile(std::vector<uint32_t>* v, double q) {
  if (v->empty()) return 0;
  const size_t i = std::min(v->size() - 1, static_cast<size_t>(q * v->size()));
  std::nth_element(v->begin(), v->begin() + i, v->end());
  return (*v)[i] / 1000.0;  // us
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2]
                      : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

struct Run {
  double ops_per_s = 0;
  double p50_us = 0;
  double p99_us = 0;
  uint64_t calls = 0;
  uint64_t errors = 0;
  // CPU time per call during the run (the server's: also what it did
  // meanwhile, e.g. gputuned's sweeper; the clients': their measured loop).
  double server_cpu_us = 0;
  double client_cpu_us = 0;
};

// CPU time (user + system) a process has used so far, in seconds.
double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::vector<std::string> f = absl::StrSplit(stat.substr(close + 2), ' ');
  if (f.size() < 13) return 0;
  double utime = 0, stime = 0;
  (void)absl::SimpleAtod(f[11], &utime);  // fields 14 and 15 of stat
  (void)absl::SimpleAtod(f[12], &stime);
  return (utime + stime) / sysconf(_SC_CLK_TCK);
}

struct Bench {
  Flags flags;
  std::string dir;
  std::string daemon_endpoint;
  std::string echo_endpoint;
  std::string db;
  std::string keys_file;
  std::string digest;
  double seconds = 1.5;
  pid_t daemon_pid = -1;
  pid_t echo_pid = -1;

  // N worker processes of one mode, started together.
  Run RunWorkers(Mode mode, int procs, int round) {
    int go[2], ready[2];
    if (pipe(go) != 0 || pipe(ready) != 0) {
      perror("pipe");
      std::exit(1);
    }
    std::vector<pid_t> pids;
    std::vector<std::string> outs;
    for (int i = 0; i < procs; ++i) {
      outs.push_back(absl::StrCat(dir, "/", ModeName(mode), "-", procs, "-",
                                  round, "-", i, ".bin"));
      pids.push_back(Spawn(
          {SelfPath(), "--role=worker", absl::StrCat("--mode=", ModeName(mode)),
           "--endpoint=" +
               (mode == Mode::kEcho ? echo_endpoint : daemon_endpoint),
           "--daemon=" + daemon_endpoint, "--db=" + db, "--keys=" + keys_file,
           "--fingerprint=" + digest, absl::StrCat("--seconds=", seconds),
           absl::StrCat("--ready_fd=", ready[1]),
           absl::StrCat("--go_fd=", go[0]), "--out=" + outs.back(),
           absl::StrCat("--seed=", i * 7919 + round * 104729)},
          dir + "/workers.log", {go[1], ready[0]}));
    }
    close(go[0]);
    close(ready[1]);
    for (int got = 0; got < procs;) {
      struct pollfd p = {ready[0], POLLIN, 0};
      if (poll(&p, 1, 60000) <= 0) {
        std::cerr << "workers did not get ready; see " << dir
                  << "/workers.log\n";
        std::exit(1);
      }
      char buf[64];
      const ssize_t n = read(ready[0], buf, sizeof(buf));
      if (n <= 0) {
        std::cerr << "a worker failed; see " << dir << "/workers.log\n";
        std::exit(1);
      }
      got += static_cast<int>(n);
    }
    const pid_t server = mode == Mode::kLookup ? daemon_pid
                         : mode == Mode::kEcho ? echo_pid
                                               : -1;
    const double server_cpu_before = server > 0 ? CpuSeconds(server) : 0;
    close(go[1]);  // go
    for (pid_t pid : pids) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::cerr << "a worker failed; see " << dir << "/workers.log\n";
        std::exit(1);
      }
    }
    close(ready[0]);
    std::vector<uint32_t> all;
    double client_cpu = 0;
    Run run;
    for (const std::string& out : outs) {
      absl::StatusOr<Samples> s = ReadSamples(out);
      if (!s.ok()) {
        std::cerr << s.status() << "\n";
        std::exit(1);
      }
      run.errors += s->errors;
      client_cpu += s->cpu_seconds;
      all.insert(all.end(), s->latency_ns.begin(), s->latency_ns.end());
      std::filesystem::remove(out);
    }
    const double server_cpu =
        server > 0 ? CpuSeconds(server) - server_cpu_before : 0;
    run.calls = all.size();
    run.ops_per_s = all.size() / seconds;
    if (!all.empty()) {
      run.server_cpu_us = server_cpu * 1e6 / all.size();
      run.client_cpu_us = client_cpu * 1e6 / all.size();
    }
    run.p50_us = Percentile(&all, 0.50);
    run.p99_us = Percentile(&all, 0.99);
    return run;
  }
};

// Memoised lookups: ns per call over `rounds` passes of `keys` (all HITs in
// the memo), per thread with `threads` threads.
double MemoHitNs(Client& client, const std::vector<v1::Key>& keys, int threads,
                 bool read_execution = false) {
  const int passes = std::max(1, 2000000 / static_cast<int>(keys.size()));
  std::vector<double> ns(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t hits = 0;
      size_t sink = 0;
      const auto start = Clock::now();
      for (int p = 0; p < passes; ++p) {
        for (const v1::Key& key : keys) {
          // What an inference server does with a hit: read the execution.
          absl::StatusOr<LookupResult> r = client.Lookup(key);
          hits += r.ok() && r->hit() && r->from_memo();
          if (read_execution) sink += r->entry().execution().kernel().size();
        }
      }
      if (read_execution && sink == 0) {
        std::cerr << "memo: no execution in any entry\n";
      }
      const double total =
          std::chrono::duration<double, std::nano>(Clock::now() - start)
              .count();
      ns[t] = total / (static_cast<double>(passes) * keys.size());
      if (hits != static_cast<uint64_t>(passes) * keys.size()) {
        std::cerr << "memo: not every lookup was a memo hit\n";
        std::exit(1);
      }
    });
  }
  for (auto& t : pool) t.join();
  return Median(ns);
}

int Orchestrate(const Flags& flags) {
  Bench b;
  b.flags = flags;
  const int entries = static_cast<int>(flags.Number("entries", 10000));
  const int batch = static_cast<int>(flags.Number("batch", 10000));
  const int batch_profile_seconds =
      static_cast<int>(flags.Number("batch_profile_seconds", 0));
  const int rounds = static_cast<int>(flags.Number("rounds", 4));
  b.seconds = flags.Number("seconds", 1.0);
  std::vector<int> procs;
  for (absl::string_view p :
       absl::StrSplit(flags.Get("procs", "1,8,32"), ',', absl::SkipEmpty())) {
    int n = 0;
    if (!absl::SimpleAtoi(p, &n) || n < 1) {
      std::cerr << "--procs: expected numbers like 1,8,32\n";
      return 2;
    }
    procs.push_back(n);
  }
  const std::string json_path = flags.Get("json", "lookup_bench.json");
  const auto bench_start = Clock::now();

  char tmpl[] = "/tmp/gputune-lookup-bench-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return 1;
  b.dir = tmpl;
  b.daemon_endpoint = "unix://" + b.dir + "/gputuned.sock";
  b.echo_endpoint = "unix://" + b.dir + "/echo.sock";
  b.db = b.dir + "/gputuned.db";
  b.keys_file = b.dir + "/keys.txt";

  const pid_t daemon = b.daemon_pid =
      Spawn({GPUTUNED_PATH, "--backend=host", "--listen=" + b.daemon_endpoint,
             "--db=" + b.db, "--log_level=warn", "--db_sync_full=false"},
            b.dir + "/gputuned.log");
  const pid_t echo = b.echo_pid =
      Spawn({SelfPath(), "--role=echo-server", "--listen=" + b.echo_endpoint},
            b.dir + "/echo.log");
  auto fail = [&](const std::string& what) {
    std::cerr << "gputune_lookup_bench: " << what << " (logs in " << b.dir
              << ")\n";
    Stop(echo);
    Stop(daemon);
    return 1;
  };

  ClientOptions options;
  options.endpoint = b.daemon_endpoint;
  options.deadline = absl::Seconds(60);
  absl::StatusOr<v1::GetStatusResponse> status;
  for (int i = 0; i < 200; ++i) {
    auto probe = Client::Create(options);  // a fresh channel per try
    status = (*probe)->GetStatus();
    if (status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!status.ok()) return fail("gputuned did not start");
  b.digest = FingerprintDigest(status->fingerprint());

  auto client = Client::Create(options);
  std::vector<v1::Entry> made = MakeEntries(entries, status->fingerprint());
  std::vector<v1::Key> keys;
  {
    std::ofstream out(b.keys_file);
    for (const v1::Entry& e : made) {
      keys.push_back(e.key());
      out << KeyText(e.key()) << "\n";
    }
  }
  for (size_t start = 0; start < made.size(); start += 5000) {
    const size_t end = std::min(made.size(), start + 5000);
    absl::StatusOr<uint32_t> n = (*client)->ImportEntries(
        std::vector<v1::Entry>(made.begin() + start, made.begin() + end));
    if (!n.ok()) return fail(absl::StrCat("import: ", n.status().ToString()));
  }
  made.clear();

  // Echo server up?
  {
    auto stub = Echo::NewStub(grpc::CreateChannel(
        b.echo_endpoint, grpc::InsecureChannelCredentials()));
    bool up = false;
    for (int i = 0; i < 200 && !up; ++i) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(500));
      EchoReply reply;
      up = stub->Echo(&ctx, EchoRequest(), &reply).ok();
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!up) return fail("the echo server did not start");
  }

  // Memo hits.
  absl::StatusOr<size_t> preloaded = (*client)->Preload(keys);
  if (!preloaded.ok() || *preloaded != keys.size()) {
    return fail("preload did not find every entry");
  }
  const double memo_ns = MemoHitNs(**client, keys, 1);
  const std::vector<v1::Key> one_key(1, keys[0]);
  const double memo_same_ns = MemoHitNs(**client, one_key, 1);
  const double memo_2t_ns = MemoHitNs(**client, keys, 2);
  // And reading the execution, as an inference server does with a hit.
  const double memo_read_ns = MemoHitNs(**client, keys, 1, true);

  // BatchLookup of `batch` keys, memo off (it would not change the RPC).
  ClientOptions no_memo = options;
  no_memo.memo_capacity = 0;
  auto rpc_client = Client::Create(no_memo);
  std::vector<v1::Key> batch_keys(
      keys.begin(), keys.begin() + std::min<size_t>(batch, keys.size()));
  // The floor for any answer of that size: the echo server moving as many
  // bytes each way through the same kind of channel.
  size_t batch_request_bytes = 0, batch_answer_bytes = 0;
  {
    v1::BatchLookupRequest request;
    for (const v1::Key& k : batch_keys) *request.add_keys() = k;
    batch_request_bytes = request.ByteSizeLong();
    auto stub = v1::TuneService::NewStub(grpc::CreateCustomChannel(
        b.daemon_endpoint, grpc::InsecureChannelCredentials(),
        ChannelArgumentsFor(options)));
    grpc::ClientContext ctx;
    v1::BatchLookupResponse response;
    if (!stub->BatchLookup(&ctx, request, &response).ok()) {
      return fail("BatchLookup through the generated stub failed");
    }
    batch_answer_bytes = response.ByteSizeLong();
  }
  auto echo_stub = Echo::NewStub(grpc::CreateCustomChannel(
      b.echo_endpoint, grpc::InsecureChannelCredentials(),
      ChannelArgumentsFor(options)));
  EchoRequest echo_request;
  echo_request.set_payload(std::string(batch_request_bytes, 'k'));
  echo_request.set_reply_size(static_cast<uint32_t>(batch_answer_bytes));

  // One round: the call 31 times back to back, as the Lookup figures are
  // measured, each until every entry is readable (read them all, as a
  // Preload's caller will: BatchLookup parses them before it returns, a
  // lookup on the first read), and its echo 31 times; the median of each. A
  // round runs before each round of the first process count's runs below (1 by
  // default), so that the machine's drift hits BatchLookup and Lookup alike;
  // the figures are the medians over the rounds.
  std::vector<double> batch_round_ms, batch_echo_round_ms;
  std::string batch_error;
  auto batch_round = [&]() -> bool {
    std::vector<double> readable_ms, echo_ms;
    for (int i = 0; i < 31; ++i) {
      const auto start = Clock::now();
      absl::StatusOr<std::vector<LookupResult>> r =
          (*rpc_client)->BatchLookup(batch_keys);
      if (!r.ok()) {
        batch_error = "BatchLookup: " + r.status().ToString();
        return false;
      }
      size_t read = 0;
      for (const LookupResult& result : *r) {
        read += result.hit() && result.entry().has_execution();
      }
      const auto readable = Clock::now();
      if (read != batch_keys.size()) {
        batch_error = "BatchLookup: not every key a HIT with an execution";
        return false;
      }
      readable_ms.push_back(
          std::chrono::duration<double, std::milli>(readable - start).count());
    }
    for (int i = 0; i < 32; ++i) {
      grpc::ClientContext ctx;
      EchoReply reply;
      const auto start = Clock::now();
      if (!echo_stub->Echo(&ctx, echo_request, &reply).ok()) {
        batch_error = "echo of a BatchLookup's bytes failed";
        return false;
      }
      if (i > 0) {  // the first call may connect
        echo_ms.push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start)
                .count());
      }
    }
    batch_round_ms.push_back(Median(readable_ms));
    batch_echo_round_ms.push_back(Median(echo_ms));
    return true;
  };

  if (batch_profile_seconds > 0) {
    // For profilers: BatchLookup back to back, the daemon's pid said first
    // (perf record -p <it>,<this> while it runs).
    std::cerr << "BatchLookup back to back for " << batch_profile_seconds
              << " s; gputuned pid " << daemon << ", this pid " << getpid()
              << "\n";
    const auto start = Clock::now();
    const auto until = start + std::chrono::seconds(batch_profile_seconds);
    int calls = 0;
    for (; Clock::now() < until; ++calls) {
      if (!(*rpc_client)->BatchLookup(batch_keys).ok()) {
        return fail("BatchLookup failed");
      }
    }
    std::cerr << "mean "
              << std::chrono::duration<double, std::milli>(Clock::now() - start)
                         .count() /
                     calls
              << " ms over " << calls << " calls (results dropped each time)\n";
  }

  // Client processes.
  const std::vector<Mode> modes = {Mode::kEcho, Mode::kLookup, Mode::kSqlite};
  std::map<std::pair<int, int>, std::vector<Run>> runs;  // (procs, mode)
  for (int n : procs) {
    for (int r = 0; r < rounds; ++r) {
      if (n == procs.front() && !batch_round()) return fail(batch_error);
      for (size_t m = 0; m < modes.size(); ++m) {
        // Rotate the order each round: no mode always runs first.
        const Mode mode = modes[(m + r) % modes.size()];
        runs[{n, static_cast<int>(mode)}].push_back(b.RunWorkers(mode, n, r));
        std::cerr << "." << std::flush;
      }
    }
  }
  if (procs.empty()) {  // memo and batch only
    for (int r = 0; r < rounds; ++r) {
      if (!batch_round()) return fail(batch_error);
    }
  }
  const double batch_median_ms = Median(batch_round_ms);
  const double batch_echo_median_ms = Median(batch_echo_round_ms);
  std::cerr << "\n";
  Stop(echo);
  Stop(daemon);

  struct Row {
    double ops, p50, p99;
    uint64_t errors;
    double server_cpu, client_cpu;
  };
  auto summarize = [&](int n, Mode mode) {
    const std::vector<Run>& rs = runs[{n, static_cast<int>(mode)}];
    std::vector<double> ops, p50, p99, server_cpu, client_cpu;
    uint64_t errors = 0;
    for (const Run& r : rs) {
      ops.push_back(r.ops_per_s);
      p50.push_back(r.p50_us);
      p99.push_back(r.p99_us);
      server_cpu.push_back(r.server_cpu_us);
      client_cpu.push_back(r.client_cpu_us);
      errors += r.errors;
    }
    return Row{Median(ops), Median(p50),        Median(p99),
               errors,      Median(server_cpu), Median(client_cpu)};
  };

  const double total_s =
      std::chrono::duration<double>(Clock::now() - bench_start).count();
  std::string json = absl::StrCat(
      "{\n  \"config\": {\"entries\": ", entries, ", \"seconds\": ", b.seconds,
      ", \"rounds\": ", rounds, ", \"batch\": ", batch_keys.size(),
      ", \"procs\": [", absl::StrJoin(procs, ", "),
      "], \"cpus\": ", std::thread::hardware_concurrency(), "},\n");
  absl::StrAppend(
      &json, "  \"memo_hit_ns\": {\"all_keys_1_thread\": ",
      absl::StrFormat("%.1f", memo_ns),
      ", \"one_key_1_thread\": ", absl::StrFormat("%.1f", memo_same_ns),
      ", \"all_keys_2_threads\": ", absl::StrFormat("%.1f", memo_2t_ns),
      ", \"all_keys_1_thread_reading_execution\": ",
      absl::StrFormat("%.1f", memo_read_ns), "},\n");

  std::printf(
      "gputune lookup benchmark: %d entries, %.1f s per run, %d "
      "rounds, %u CPUs, %.0f s in all\n\n",
      entries, b.seconds, rounds, std::thread::hardware_concurrency(), total_s);
  std::printf("%-8s %5s %10s %8s %8s %6s %10s %10s   %s\n", "mode", "procs",
              "calls/s", "p50 us", "p99 us", "errors", "server us", "client us",
              "vs echo: p50  p99   calls/s");
  absl::StrAppend(&json, "  \"runs\": [\n");
  std::vector<std::string> json_rows;
  std::vector<std::string> verdicts;
  for (int n : procs) {
    const Row echo_row = summarize(n, Mode::kEcho);
    for (Mode mode : modes) {
      const Row row = summarize(n, mode);
      std::string vs;
      if (mode != Mode::kEcho) {
        vs = absl::StrFormat("%.2fx %.2fx %.2fx", row.p50 / echo_row.p50,
                             row.p99 / echo_row.p99, row.ops / echo_row.ops);
      }
      std::printf("%-8s %5d %10.0f %8.1f %8.1f %6llu %10s %10.1f   %s\n",
                  ModeName(mode), n, row.ops, row.p50, row.p99,
                  static_cast<unsigned long long>(row.errors),
                  mode == Mode::kSqlite
                      ? "-"
                      : absl::StrFormat("%.1f", row.server_cpu).c_str(),
                  row.client_cpu, vs.c_str());
      json_rows.push_back(absl::StrFormat(
          "    {\"mode\": \"%s\", \"procs\": %d, \"calls_per_s\": %.0f, "
          "\"p50_us\": %.2f, \"p99_us\": %.2f, \"errors\": %llu, "
          "\"server_cpu_us_per_call\": %.2f, \"client_cpu_us_per_call\": "
          "%.2f}",
          ModeName(mode), n, row.ops, row.p50, row.p99,
          static_cast<unsigned long long>(row.errors), row.server_cpu,
          row.client_cpu));
    }
    const Row lookup = summarize(n, Mode::kLookup);
    if (n == 1) {
      verdicts.push_back(absl::StrFormat(
          "Lookup p50 %.2fx echo (target <= 1.25): %s",
          lookup.p50 / echo_row.p50,
          lookup.p50 <= 1.25 * echo_row.p50 ? "met" : "MISSED"));
      verdicts.push_back(absl::StrFormat(
          "Lookup p99 %.2fx echo (target <= 1.25): %s",
          lookup.p99 / echo_row.p99,
          lookup.p99 <= 1.25 * echo_row.p99 ? "met" : "MISSED"));
    } else {
      verdicts.push_back(absl::StrFormat(
          "throughput with %d procs %.2fx echo (target >= 0.85): %s", n,
          lookup.ops / echo_row.ops,
          lookup.ops >= 0.85 * echo_row.ops ? "met" : "MISSED"));
    }
    std::printf("\n");
  }
  absl::StrAppend(&json, absl::StrJoin(json_rows, ",\n"), "\n  ],\n");
  const std::string batch_rounds =
      absl::StrJoin(batch_round_ms, " ", [](std::string* out, double ms) {
        absl::StrAppend(out, absl::StrFormat("%.2f", ms));
      });
  verdicts.push_back(absl::StrFormat(
      "BatchLookup of %zu keys until every entry is readable %.2f ms "
      "(rounds %s) (target <= 14): %s; echo of its bytes (%zu B in, %zu B "
      "out) %.2f ms",
      batch_keys.size(), batch_median_ms, batch_rounds,
      batch_median_ms <= 14 ? "met" : "MISSED", batch_request_bytes,
      batch_answer_bytes, batch_echo_median_ms));
  verdicts.push_back(absl::StrFormat(
      "memo hit %.1f ns (%zu keys; one key %.1f ns; 2 threads %.1f ns) "
      "(target <= 100): %s; reading the execution too %.1f ns (target <= "
      "150): %s",
      memo_ns, keys.size(), memo_same_ns, memo_2t_ns,
      memo_ns <= 100 ? "met" : "MISSED", memo_read_ns,
      memo_read_ns <= 150 ? "met" : "MISSED"));
  for (const std::string& v : verdicts) std::printf("%s\n", v.c_str());
  absl::StrAppend(
      &json, "  \"batch_lookup\": {\"keys\": ", batch_keys.size(),
      ", \"readable_median_ms\": ", absl::StrFormat("%.3f", batch_median_ms),
      ", \"rounds_ms\": [", absl::StrJoin(batch_round_ms, ", "), "]",
      ", \"request_bytes\": ", batch_request_bytes,
      ", \"answer_bytes\": ", batch_answer_bytes,
      ", \"echo_of_same_bytes_ms\": ",
      absl::StrFormat("%.3f", batch_echo_median_ms), "},\n",
      "  \"verdicts\": [\"", absl::StrJoin(verdicts, "\", \""),
      "\"],\n  \"total_seconds\": ", absl::StrFormat("%.1f", total_s), "\n}\n");
  std::ofstream(json_path) << json;
  std::printf("\nJSON: %s\n", json_path.c_str());
  std::filesystem::remove_all(b.dir);
  return 0;
}

int Worker(const Flags& flags) {
  WorkerArgs args;
  if (!ParseMode(flags.Get("mode", ""), &args.mode)) {
    std::cerr << "worker: --mode must be lookup, echo or sqlite\n";
    return 2;
  }
  args.endpoint = flags.Get("endpoint", "");
  args.daemon = flags.Get("daemon", "");
  args.db = flags.Get("db", "");
  args.keys_file = flags.Get("keys", "");
  args.fingerprint = flags.Get("fingerprint", "");
  args.seconds = flags.Number("seconds", 1.0);
  args.ready_fd = static_cast<int>(flags.Number("ready_fd", -1));
  args.go_fd = static_cast<int>(flags.Number("go_fd", -1));
  args.out = flags.Get("out", "");
  args.seed = static_cast<uint32_t>(flags.Number("seed", 0));
  return RunWorker(args);
}

}  // namespace
}  // namespace gputune::bench

int main(int argc, char** argv) {
  const gputune::bench::Flags flags = gputune::bench::ParseFlags(argc, argv);
  const std::string role = flags.Get("role", "");
  if (role == "worker") return gputune::bench::Worker(flags);
  if (role == "echo-server") {
    return gputune::bench::RunEchoServer(flags.Get("listen", ""));
  }
  return gputune::bench::Orchestrate(flags);
}
