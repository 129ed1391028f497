// Change feed latency: from a re-tune's or delete's ack to the change in the
// memo of each of N client processes.
//
//   gputune_feed_bench [--clients=8] [--rounds=50]
//
// Starts gputuned (--backend=none) and forks N processes, each a
// gputune::Client (memo_ttl infinite: only the feed can change its memo).
// Each round the parent either re-imports the key every client memoised
// with a new kernel (a re-tune) or deletes another key they memoised, and
// notes the time the call returned; each client polls its memo every 50 us
// and reports when it saw the change (CLOCK_MONOTONIC, one clock for all
// processes). Prints percentiles of (seen - ack) over all rounds and
// clients; negative means the memo changed before the writer had its ack.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gputune/client.h"
#include "tests/support/daemon_process.h"

namespace {

using gputune::testing::DenseKey;

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

gputune::v1::Entry EntryFor(uint32_t m, const std::string& kernel) {
  gputune::v1::Entry e;
  *e.mutable_key() = DenseKey(m);
  e.mutable_execution()->set_kernel(kernel);
  return e;
}

void WriteLine(int fd, const std::string& line) {
  const std::string s = line + "\n";
  if (write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size())) {
    _exit(3);
  }
}

std::string ReadLine(int fd) {
  std::string line;
  char c;
  while (read(fd, &c, 1) == 1 && c != '\n') line += c;
  return line;
}

// A client process: commands on `in`, answers on `out`.
//   memo M        Lookup key M until it is memoised; "ok"
//   kernel M K    poll until the memo holds key M with kernel K; the time
//   gone          poll until the memo holds one entry fewer; the time
[[noreturn]] void Child(const std::string& endpoint, int in, int out) {
  gputune::ClientOptions options;
  options.endpoint = endpoint;
  options.memo_ttl = absl::InfiniteDuration();
  auto client = gputune::Client::Create(options);
  if (!client.ok()) _exit(2);
  gputune::Client& c = **client;
  while (true) {
    const std::string cmd = ReadLine(in);
    if (cmd.empty() || cmd == "quit") _exit(0);
    std::vector<std::string> w = absl::StrSplit(cmd, ' ');
    uint32_t m = 0;
    if (w.size() > 1) (void)absl::SimpleAtoi(w[1], &m);
    if (w[0] == "memo") {
      while (true) {
        auto r = c.Lookup(DenseKey(m));
        if (r.ok() && r->hit() && r->from_memo()) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      WriteLine(out, "ok");
    } else if (w[0] == "kernel") {
      while (true) {
        gputune::LookupResult r = c.TryLookup(DenseKey(m));
        if (r.hit() && r.entry().execution().kernel() == w[2]) break;
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      WriteLine(out, absl::StrCat(NowNs()));
    } else if (w[0] == "gone") {
      const size_t before = c.memo_size();
      while (c.memo_size() >= before) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      WriteLine(out, absl::StrCat(NowNs()));
    }
  }
}

struct Proc {
  pid_t pid;
  int to, from;
};

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--child") {
    Child(argv[2], 0, 1);
  }
  int clients = 8, rounds = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--clients=", 0) == 0) clients = std::atoi(a.c_str() + 10);
    if (a.rfind("--rounds=", 0) == 0) rounds = std::atoi(a.c_str() + 9);
  }
  gputune::testing::DaemonProcess daemon({"--backend=none"});
  gputune::ClientOptions wo;
  wo.endpoint = daemon.endpoint();
  wo.follow_changes = false;
  auto writer = gputune::Client::Create(wo);
  if (!writer.ok()) return 1;
  const uint32_t kRetuned = 1;
  if (!(*writer)->ImportEntries({EntryFor(kRetuned, "v0")}).ok()) return 1;

  std::vector<Proc> procs;
  for (int i = 0; i < clients; ++i) {
    int down[2], up[2];
    if (pipe(down) != 0 || pipe(up) != 0) return 1;
    const pid_t pid = fork();
    if (pid == 0) {
      // A fresh process (gRPC does not survive fork): this binary again.
      dup2(down[0], 0);
      dup2(up[1], 1);
      const std::string endpoint = daemon.endpoint();
      execl("/proc/self/exe", argv[0], "--child", endpoint.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    close(down[0]);
    close(up[1]);
    procs.push_back({pid, down[1], up[0]});
  }
  auto all = [&](const std::string& cmd) {
    for (const Proc& p : procs) WriteLine(p.to, cmd);
  };
  std::vector<double> retune_ms, delete_ms;
  all(absl::StrCat("memo ", kRetuned));
  for (const Proc& p : procs) ReadLine(p.from);
  for (int r = 1; r <= rounds; ++r) {
    const bool retune = r % 2 == 1;
    const uint32_t key = 1000 + r;
    if (!retune) {
      // A key every client holds, to delete.
      if (!(*writer)->ImportEntries({EntryFor(key, "d")}).ok()) return 1;
      all(absl::StrCat("memo ", key));
      for (const Proc& p : procs) ReadLine(p.from);
    }
    const std::string kernel = absl::StrCat("v", r);
    all(retune ? absl::StrCat("kernel ", kRetuned, " ", kernel) : "gone");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling
    bool ok = false;
    if (retune) {
      ok = (*writer)->ImportEntries({EntryFor(kRetuned, kernel)}).ok();
    } else {
      gputune::v1::DeleteEntriesRequest del;
      *del.add_keys() = DenseKey(key);
      ok = (*writer)->DeleteEntries(del).ok();
    }
    const int64_t ack = NowNs();
    if (!ok) return 1;
    for (const Proc& p : procs) {
      int64_t seen = 0;
      (void)absl::SimpleAtoi(ReadLine(p.from), &seen);
      (retune ? retune_ms : delete_ms).push_back((seen - ack) / 1e6);
    }
  }
  all("quit");
  for (const Proc& p : procs) waitpid(p.pid, nullptr, 0);
  std::printf(
      "%d client processes, %d rounds: ms from the ack to the memo change\n",
      clients, rounds);
  std::printf("%-8s %6s %8s %8s %8s %8s\n", "change", "n", "p50", "p90", "p99",
              "max");
  for (const auto& [name, v] :
       {std::pair<const char*, const std::vector<double>&>{"re-tune",
                                                           retune_ms},
        {"delete", delete_ms}}) {
    std::printf("%-8s %6zu %8.2f %8.2f %8.2f %8.2f\n", name, v.size(),
                Percentile(v, 0.5), Percentile(v, 0.9), Percentile(v, 0.99),
                *std::max_element(v.begin(), v.end()));
  }
  return 0;
}
