// DaemonProcess: the real gputuned binary on a temporary unix socket and
// database, for integration tests.
//
//   DaemonProcess d({"--backend=host"});   // starts and waits until it serves
//   auto stub = d.Stub();                  // generated TuneService stub
//   d.Kill();                              // kill -9
//   d.Start();                             // again, same socket and database
//
// The binary is GPUTUNED_PATH (set by CMake). Each instance has its own
// directory under /tmp, removed on destruction; the daemon's log is kept in
// it (log_path()) and printed when a start fails.
#ifndef GPUTUNE_TESTS_SUPPORT_DAEMON_PROCESS_H_
#define GPUTUNE_TESTS_SUPPORT_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"

namespace gputune::testing {

class DaemonProcess {
 public:
  // Starts gputuned with `--listen`, `--db` pointing into a fresh directory
  // plus `flags`; `env` is added to its environment. Throws std::runtime_error
  // (with the daemon's log) when it does not serve within 20 s.
  // `child_setup` runs in the child between fork and exec (e.g. setrlimit,
  // umask): async-signal-safe calls only.
  explicit DaemonProcess(std::vector<std::string> flags = {},
                         std::map<std::string, std::string> env = {},
                         std::function<void()> child_setup = {});
  ~DaemonProcess();

  void Start();
  // SIGKILL and reap.
  void Kill();
  // SIGTERM and wait; returns the exit status (as from waitpid).
  int Terminate();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  const std::string& dir() const { return dir_; }
  std::string endpoint() const { return "unix://" + socket_path_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& db_path() const { return db_path_; }
  std::string log_path() const { return dir_ + "/gputuned.log"; }
  std::string Log() const;

  std::shared_ptr<grpc::Channel> Channel() const;
  std::unique_ptr<v1::TuneService::Stub> Stub() const;
  std::unique_ptr<v1::AdminService::Stub> AdminStub() const;

  // Extra flags for the next Start() (e.g. to change the backend).
  std::vector<std::string>& flags() { return flags_; }
  // What runs in the child before exec at the next Start() (e.g. setrlimit).
  std::function<void()>& child_setup() { return child_setup_; }

 private:
  std::string dir_;
  std::string socket_path_;
  std::string db_path_;
  std::vector<std::string> flags_;
  std::map<std::string, std::string> env_;
  std::function<void()> child_setup_;
  pid_t pid_ = -1;
};

// Starts GPUTUNED_PATH with `args` (argv[1..]) and `env` added to its
// environment, its stdout and stderr appended to `log_path`. Returns the pid
// at once, without waiting for the daemon to serve; the caller reaps it.
// Throws std::runtime_error when fork fails. DaemonProcess::Start uses it;
// tests that must control the whole command line (no --listen/--db, say)
// call it directly.
pid_t SpawnGputuned(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env,
                    const std::string& log_path,
                    const std::function<void()>& child_setup = {});

// Runs `path` with `args` to completion, `child_setup` between fork and exec
// (async-signal-safe calls only); returns the exit code (128 + signal when
// killed) and sets *output to its stdout and stderr together.
int RunProgram(const std::string& path, const std::vector<std::string>& args,
               std::string* output,
               const std::function<void()>& child_setup = {});

// The whole file, or "" when it cannot be read.
std::string ReadFile(const std::string& path);

// Runs `command` with /bin/sh, its output (and the command itself) appended
// to the file `log`; true when it exits 0.
bool Sh(const std::string& command, const std::string& log);

// The resident set of process `pid` in KiB (VmRSS in /proc/PID/status); -1
// when it cannot be read.
int64_t RssKiB(pid_t pid);

// Sends `signal` to `pid` and waits for it to exit; returns the waitpid
// status, or -1 (doing nothing) when pid <= 0.
int SignalAndReap(pid_t pid, int signal);

// A client context whose deadline is `seconds` from now. 60 s by default:
// a deadline in a test bounds waiting for an answer on a loaded machine
// (under the sanitizers too); it is not a speed check.
std::unique_ptr<grpc::ClientContext> Ctx(int seconds = 60);

// A Key for tests: dense_bf16 decode "test.role" with the given M and K/N.
v1::Key DenseKey(uint32_t m, uint32_t k = 256, uint32_t n = 256,
                 const std::string& candidate_set = "cs1",
                 const std::string& role = "test.role");

// What a driver, CUDA, cuBLASLt or gputune upgrade leaves in the cache of
// the daemon `stub` talks to: `key`'s entry (kernel "older.kernel") as
// measured on this daemon's device model with an older kernel library, or,
// with `device_name`, on another device model. Imports it (an operator
// call); throws std::runtime_error when the daemon refuses.
v1::Entry ImportFromOlderSoftware(v1::TuneService::Stub& stub,
                                  const v1::Key& key,
                                  const std::string& device_name = "");

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_SUPPORT_DAEMON_PROCESS_H_
