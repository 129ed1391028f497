// Soak test (not in CI): N client processes call every RPC of gputuned for a
// while, with faults injected, and at the end every acknowledged Record must
// still be there.
//
//   build/bench/soak/gputune_soak [--duration=10m] [--clients=32]
//       [--fault_every=10s] [--disk_full=true] [--dir=/tmp/...]
//
// Faults, in turn, every --fault_every: a connection flood (1,100 unix
// connections held for 2 s; the daemon runs under a 1024-descriptor limit,
// as under systemd's default), SIGSTOP of the daemon for 2 s, kill -9 and
// restart, and a full disk (the daemon restarted with RLIMIT_FSIZE = 256 KiB
// for 8 s, then restarted without). A client that gets UNAVAILABLE waits
// 20 ms before its next call. Reports calls and
// errors by method and code, p50/p99 latency, the daemon's RSS over time and
// the acknowledged records lost (must be 0; the exit status is 1 otherwise).
//
// The parent uses no gRPC until the clients are done: they are forked from
// it, and gRPC does not survive fork.
#include <fcntl.h>
#include <signal.h>
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
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace gputune::soak {
namespace {

struct Options {
  absl::Duration duration = absl::Minutes(10);
  int clients = 32;
  absl::Duration fault_every = absl::Seconds(10);
  bool disk_full = true;
  std::string dir;
};

Options ParseFlags(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::pair<std::string, std::string> kv = absl::StrSplit(
        absl::string_view(argv[i]).substr(2), absl::MaxSplits('=', 1));
    bool ok = absl::string_view(argv[i]).substr(0, 2) == "--";
    if (kv.first == "duration") {
      ok = ok && absl::ParseDuration(kv.second, &o.duration);
    } else if (kv.first == "clients") {
      ok = ok && absl::SimpleAtoi(kv.second, &o.clients) && o.clients > 0;
    } else if (kv.first == "fault_every") {
      ok = ok && absl::ParseDuration(kv.second, &o.fault_every);
    } else if (kv.first == "disk_full") {
      o.disk_full = kv.second != "false" && kv.second != "0";
    } else if (kv.first == "dir") {
      o.dir = kv.second;
    } else {
      ok = false;
    }
    if (!ok) {
      std::cerr << "gputune_soak: bad flag " << argv[i]
                << " (see the comment at the top of bench/soak/soak.cc)\n";
      std::exit(2);
    }
  }
  return o;
}

v1::Key Key(const std::string& role, uint32_t m) {
  v1::Key key;
  auto* d = key.mutable_dense_bf16();
  d->set_phase(v1::PHASE_PREFILL);
  d->set_role(role);
  d->set_tokens(m);
  d->set_input_features(64);
  d->set_output_features(64);
  key.set_candidate_set("soak");
  return key;
}

// ---------------------------------------------------------------------------
// The daemon.

class Daemon {
 public:
  explicit Daemon(std::string dir) : dir_(std::move(dir)) {}
  std::string socket() const { return dir_ + "/soak.sock"; }
  std::string db() const { return dir_ + "/soak.db"; }
  pid_t pid() const { return pid_; }

  // Starts gputuned (RLIMIT_NOFILE 1024; RLIMIT_FSIZE `fsize` when > 0) and
  // waits for its socket.
  void Start(rlim_t fsize = 0) {
    pid_ = fork();
    if (pid_ == 0) {
      freopen((dir_ + "/gputuned.log").c_str(), "a", stderr);
      rlimit files{1024, 1024};
      setrlimit(RLIMIT_NOFILE, &files);
      if (fsize > 0) {
        signal(SIGXFSZ, SIG_IGN);  // EFBIG, as on a full disk
        rlimit size{fsize, fsize};
        setrlimit(RLIMIT_FSIZE, &size);
      }
      const std::string listen = "--listen=unix://" + socket();
      const std::string db_flag = "--db=" + db();
      execl(GPUTUNED_PATH, GPUTUNED_PATH, listen.c_str(), db_flag.c_str(),
            "--backend=host", "--tune_budget=20ms", "--max_candidates=2",
            "--lease_ttl=5s", static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 400 && !std::filesystem::exists(socket()); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  void Stop(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  int64_t RssKiB() const {
    std::ifstream in(absl::StrCat("/proc/", pid_, "/status"));
    std::string line;
    while (std::getline(in, line)) {
      int64_t kib = 0;
      if (line.rfind("VmRSS:", 0) == 0 &&
          absl::SimpleAtoi(absl::StripAsciiWhitespace(
                               absl::StripSuffix(line.substr(6), "kB")),
                           &kib)) {
        return kib;
      }
    }
    return 0;
  }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

// ---------------------------------------------------------------------------
// A client process.

struct Tally {
  std::map<std::string, std::map<int, uint64_t>> codes;  // method -> code -> n
  std::vector<uint32_t> micros;                          // every call
};

void ClientMain(int index, const Options& o, const std::string& socket,
                absl::Time end) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(
      "unix://" + socket, grpc::InsecureChannelCredentials(), args);
  auto stub = v1::TuneService::NewStub(channel);
  auto admin = v1::AdminService::NewStub(channel);
  std::mt19937 rng(static_cast<uint32_t>(index * 7919 + getpid()));
  const std::string role = absl::StrCat("soak.c", index);
  std::ofstream acked(absl::StrCat(o.dir, "/acked.", index));
  Tally tally;
  auto timed = [&](const char* method, auto&& call) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::seconds(2));
    const auto t0 = std::chrono::steady_clock::now();
    const grpc::Status s = call(&ctx);
    tally.micros.push_back(static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(
            std::chrono::steady_clock::now() - t0)
            .count()));
    ++tally.codes[method][s.error_code()];
    if (s.error_code() == grpc::StatusCode::UNAVAILABLE) {
      // As a real client backs off: not thousands of failures a second.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return s;
  };
  uint64_t seq = 0;
  while (absl::Now() < end) {
    ++seq;
    const uint32_t m = 1 + rng() % 100000;
    const int op = static_cast<int>(rng() % 100);
    if (op < 30) {
      v1::LookupRequest req;
      *req.mutable_key() = Key(role, m);
      v1::LookupResponse resp;
      timed("Lookup", [&](auto* c) { return stub->Lookup(c, req, &resp); });
    } else if (op < 40) {
      v1::BatchLookupRequest req;
      for (int i = 0; i < 16; ++i)
        *req.add_keys() = Key(role, 1 + rng() % 100000);
      v1::BatchLookupResponse resp;
      timed("BatchLookup",
            [&](auto* c) { return stub->BatchLookup(c, req, &resp); });
    } else if (op < 65) {
      // Claim, maybe renew, then record (acknowledged: logged) or abandon.
      v1::ClaimRequest claim;
      *claim.mutable_key() = Key(role, m);
      claim.set_holder(absl::StrCat("soak client ", index));
      v1::ClaimResponse granted;
      if (!timed("Claim",
                 [&](auto* c) { return stub->Claim(c, claim, &granted); })
               .ok() ||
          granted.outcome() != v1::CLAIM_OUTCOME_GRANTED) {
        continue;
      }
      const uint64_t id = granted.claim().claim_id();
      if (op % 3 == 0) {
        v1::RenewRequest renew;
        renew.set_claim_id(id);
        v1::RenewResponse renewed;
        timed("Renew",
              [&](auto* c) { return stub->Renew(c, renew, &renewed); });
      }
      if (op % 5 == 0) {
        v1::AbandonRequest abandon;
        abandon.set_claim_id(id);
        abandon.set_reason("soak");
        v1::AbandonResponse abandoned;
        timed("Abandon",
              [&](auto* c) { return stub->Abandon(c, abandon, &abandoned); });
        continue;
      }
      v1::RecordRequest record;
      record.set_claim_id(id);
      const std::string kernel = absl::StrCat("soak.k", index, "_", seq);
      record.mutable_execution()->set_kernel(kernel);
      v1::RecordResponse recorded;
      if (timed("Record", [&](auto* c) {
            return stub->Record(c, record, &recorded);
          }).ok()) {
        acked << m << "\t" << kernel << "\n" << std::flush;
      }
    } else if (op < 70) {
      v1::GetEntryRequest req;
      *req.mutable_key() = Key(role, m);
      v1::GetEntryResponse resp;
      timed("GetEntry", [&](auto* c) { return stub->GetEntry(c, req, &resp); });
    } else if (op < 75) {
      v1::ListEntriesRequest req;
      req.mutable_filter()->set_role(role);
      req.set_page_size(50);
      v1::ListEntriesResponse resp;
      timed("ListEntries",
            [&](auto* c) { return stub->ListEntries(c, req, &resp); });
    } else if (op < 80) {
      v1::GetStatusResponse resp;
      timed("GetStatus", [&](auto* c) {
        return stub->GetStatus(c, v1::GetStatusRequest(), &resp);
      });
    } else if (op < 84) {
      v1::WatchRequest req;
      *req.mutable_key() = Key(role, m);
      timed("Watch", [&](grpc::ClientContext* c) {
        c->set_deadline(std::chrono::system_clock::now() +
                        std::chrono::milliseconds(200));
        auto reader = stub->Watch(c, req);
        v1::WatchResponse resp;
        while (reader->Read(&resp)) {
        }
        return reader->Finish();
      });
    } else if (op < 88) {
      v1::TuneDenseRequest req;
      *req.mutable_key() = Key("soak.tune", 1 + rng() % 64);
      req.set_wait(false);
      v1::TuneDenseResponse resp;
      timed("TuneDense",
            [&](auto* c) { return stub->TuneDense(c, req, &resp); });
    } else if (op < 93) {
      // Imports and deletes keep to their own role: never an acked key.
      v1::ImportEntriesRequest req;
      v1::Entry* e = req.add_entries();
      *e->mutable_key() = Key("soak.imp", m);
      e->mutable_execution()->set_kernel("soak.imported");
      v1::ImportEntriesResponse resp;
      timed("ImportEntries",
            [&](auto* c) { return stub->ImportEntries(c, req, &resp); });
    } else if (op < 96) {
      v1::DeleteEntriesRequest req;
      *req.add_keys() = Key("soak.imp", m);
      v1::DeleteEntriesResponse resp;
      timed("DeleteEntries",
            [&](auto* c) { return stub->DeleteEntries(c, req, &resp); });
    } else if (op < 99) {
      v1::SetLogLevelRequest req;
      req.set_level("info");
      v1::SetLogLevelResponse resp;
      timed("SetLogLevel",
            [&](auto* c) { return admin->SetLogLevel(c, req, &resp); });
    } else {
      v1::BackupRequest req;
      req.set_path(absl::StrCat(o.dir, "/backup.", index, ".", seq, ".db"));
      v1::BackupResponse resp;
      if (timed("Backup", [&](auto* c) {
            return admin->Backup(c, req, &resp);
          }).ok()) {
        std::filesystem::remove(req.path());
      }
    }
  }
  std::ofstream out(absl::StrCat(o.dir, "/tally.", index));
  for (const auto& [method, codes] : tally.codes) {
    for (const auto& [code, n] : codes) {
      out << "c\t" << method << "\t" << code << "\t" << n << "\n";
    }
  }
  for (uint32_t us : tally.micros) out << "l\t" << us << "\n";
}

// ---------------------------------------------------------------------------
// Faults.

void Flood(const Daemon& d) {
  std::vector<int> fds;
  for (int i = 0; i < 1100; ++i) {
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s",
                  d.socket().c_str());
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      fds.push_back(fd);
    } else {
      close(fd);
    }
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  for (int fd : fds) close(fd);
}

// RLIMIT_FSIZE fails every write at an offset past it (EFBIG): with 256 KiB
// the WAL fills after a few dozen commits and checkpoints fail, as on a full
// disk; reads of the (larger) database go on. (The daemon's log stops
// growing too for that while.)
constexpr rlim_t kDiskFullLimit = 256 << 10;

int Main(int argc, char** argv) {
  Options o = ParseFlags(argc, argv);
  if (o.dir.empty()) {
    char tmpl[] = "/tmp/gputune-soak-XXXXXX";
    o.dir = mkdtemp(tmpl);
  }
  std::filesystem::create_directories(o.dir);
  Daemon daemon(o.dir);
  daemon.Start();
  const absl::Time start = absl::Now();
  const absl::Time end = start + o.duration;
  std::vector<pid_t> clients;
  for (int i = 0; i < o.clients; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      ClientMain(i, o, daemon.socket(), end);
      _exit(0);
    }
    clients.push_back(pid);
  }
  std::vector<std::pair<int, int64_t>> rss;  // seconds, KiB
  absl::Time next_fault = start + o.fault_every;
  absl::Time next_sample = start;
  int fault = 0;
  std::map<std::string, int> faults;
  while (absl::Now() < end) {
    if (absl::Now() >= next_sample) {
      rss.emplace_back(
          static_cast<int>((absl::Now() - start) / absl::Seconds(1)),
          daemon.RssKiB());
      next_sample += absl::Seconds(5);
    }
    if (absl::Now() >= next_fault) {
      const int kinds = o.disk_full ? 4 : 3;
      switch (fault++ % kinds) {
        case 0:
          Flood(daemon);
          ++faults["connection flood"];
          break;
        case 1:
          kill(daemon.pid(), SIGSTOP);
          std::this_thread::sleep_for(std::chrono::seconds(2));
          kill(daemon.pid(), SIGCONT);
          ++faults["SIGSTOP 2 s"];
          break;
        case 2:
          daemon.Stop(SIGKILL);
          daemon.Start();
          ++faults["kill -9"];
          break;
        case 3: {
          daemon.Stop(SIGTERM);
          daemon.Start(kDiskFullLimit);
          std::this_thread::sleep_for(std::chrono::seconds(8));
          daemon.Stop(SIGTERM);
          daemon.Start();
          ++faults["disk full 8 s"];
          break;
        }
      }
      next_fault = absl::Now() + o.fault_every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (pid_t pid : clients) waitpid(pid, nullptr, 0);
  rss.emplace_back(static_cast<int>((absl::Now() - start) / absl::Seconds(1)),
                   daemon.RssKiB());
  daemon.Stop(SIGTERM);
  daemon.Start();

  // Every acknowledged record must be there, as recorded.
  auto stub = v1::TuneService::NewStub(grpc::CreateChannel(
      "unix://" + daemon.socket(), grpc::InsecureChannelCredentials()));
  uint64_t acked = 0;
  uint64_t lost = 0;
  std::map<std::string, std::map<int, uint64_t>> codes;
  std::vector<uint32_t> micros;
  for (int i = 0; i < o.clients; ++i) {
    std::map<uint32_t, std::string> last;  // a key is recorded once, but...
    std::ifstream in(absl::StrCat(o.dir, "/acked.", i));
    std::string line;
    while (std::getline(in, line)) {
      std::pair<std::string, std::string> kv =
          absl::StrSplit(line, absl::MaxSplits('\t', 1));
      uint32_t m = 0;
      if (absl::SimpleAtoi(kv.first, &m)) last[m] = kv.second;
    }
    for (const auto& [m, kernel] : last) {
      ++acked;
      v1::GetEntryRequest req;
      *req.mutable_key() = Key(absl::StrCat("soak.c", i), m);
      v1::GetEntryResponse resp;
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
      if (!stub->GetEntry(&ctx, req, &resp).ok() ||
          resp.entry().execution().kernel() != kernel) {
        ++lost;
      }
    }
    std::ifstream tally(absl::StrCat(o.dir, "/tally.", i));
    while (std::getline(tally, line)) {
      std::vector<std::string> f = absl::StrSplit(line, '\t');
      if (f.size() == 4 && f[0] == "c") {
        int code = 0;
        uint64_t n = 0;
        if (absl::SimpleAtoi(f[2], &code) && absl::SimpleAtoi(f[3], &n)) {
          codes[f[1]][code] += n;
        }
      } else if (f.size() == 2 && f[0] == "l") {
        uint32_t us = 0;
        if (absl::SimpleAtoi(f[1], &us)) micros.push_back(us);
      }
    }
  }
  daemon.Stop(SIGTERM);

  uint64_t calls = 0;
  std::cout << "gputune_soak: " << o.clients << " clients, "
            << absl::FormatDuration(o.duration) << ", a fault every "
            << absl::FormatDuration(o.fault_every) << " (dir " << o.dir
            << ")\nfaults:";
  for (const auto& [name, n] : faults) std::cout << " " << name << " x" << n;
  std::cout << "\ncalls by method and code:\n";
  for (const auto& [method, by_code] : codes) {
    std::cout << "  " << method << ":";
    for (const auto& [code, n] : by_code) {
      std::cout << " "
                << absl::StatusCodeToString(static_cast<absl::StatusCode>(code))
                << "=" << n;
      calls += n;
    }
    std::cout << "\n";
  }
  std::sort(micros.begin(), micros.end());
  auto pct = [&](double p) {
    return micros.empty()
               ? 0u
               : micros[std::min(micros.size() - 1,
                                 static_cast<size_t>(p * micros.size()))];
  };
  std::cout << "calls: " << calls << ", latency p50 " << pct(0.5) << " us, p99 "
            << pct(0.99) << " us (deadline 2 s)\n";
  std::cout << "daemon RSS (s: MiB):";
  for (const auto& [s, kib] : rss) {
    std::cout << " " << s << ":" << absl::StrFormat("%.1f", kib / 1024.0);
  }
  std::cout << "\nacknowledged records: " << acked << ", lost: " << lost
            << "\n";
  return lost == 0 ? 0 : 1;
}

}  // namespace
}  // namespace gputune::soak

int main(int argc, char** argv) { return gputune::soak::Main(argc, argv); }
