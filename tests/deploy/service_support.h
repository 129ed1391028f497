// Helpers for the deploy suite: gputuned run the way systemd runs it.
//
//   TempDir dir;
//   NotifySocket notify(dir.path());                // stands in for systemd
//   Service d({"--device=0"}, {{"NOTIFY_SOCKET", notify.path()},
//                              {"RUNTIME_DIRECTORY", dir.path()}}, dir.path());
//   std::optional<Notification> ready = notify.ReceiveUntil("READY=1", 20s);
//   d.Terminate();
//
// Nothing here waits for the daemon to serve (DaemonProcess does): the tests
// want to see what the daemon tells systemd, and when.
#ifndef GPUTUNE_TESTS_DEPLOY_SERVICE_SUPPORT_H_
#define GPUTUNE_TESTS_DEPLOY_SERVICE_SUPPORT_H_

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/support/status.h"
#include "tests/support/daemon_process.h"  // ReadFile

namespace gputune::testing {

// A fresh directory under /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One sd_notify datagram: "NAME=value" lines.
struct Notification {
  std::string text;
  std::chrono::steady_clock::time_point received;

  // Whether a line equals `line` (e.g. "READY=1").
  bool Has(const std::string& line) const;
  // The value of NAME=..., or "" when absent.
  std::string Field(const std::string& name) const;
};

// A datagram unix socket at <dir>/<name> that receives what gputuned sends
// to $NOTIFY_SOCKET. Throws std::runtime_error when it cannot bind.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& dir,
                        const std::string& name = "notify.sock");
  ~NotifySocket();
  NotifySocket(const NotifySocket&) = delete;
  NotifySocket& operator=(const NotifySocket&) = delete;

  const std::string& path() const { return path_; }

  // The next datagram, or nullopt when none arrives within `timeout`.
  std::optional<Notification> Receive(std::chrono::milliseconds timeout);
  // Datagrams until one has the line `line`; returns that one, or nullopt
  // after `timeout`. The ones before it are appended to *before if given.
  std::optional<Notification> ReceiveUntil(
      const std::string& line, std::chrono::milliseconds timeout,
      std::vector<Notification>* before = nullptr);

 private:
  std::string path_;
  int fd_ = -1;
};

// gputuned started with exactly `args` and `env` (SpawnGputuned), logging to
// <log_dir>/gputuned.log; killed with SIGKILL at scope exit if still running.
class Service {
 public:
  Service(std::vector<std::string> args, std::map<std::string, std::string> env,
          const std::string& log_dir);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Starts it again with the same command line and environment.
  void Start();
  // SIGTERM and wait; the waitpid status.
  int Terminate();
  // SIGKILL and wait.
  void Kill();
  // Sends `signal` and returns at once.
  void Signal(int signal) const;
  pid_t pid() const { return pid_; }

  const std::string& log_path() const { return log_path_; }
  std::string Log() const;
  // Polls the log until it contains `text`; false after `timeout`.
  bool WaitForLog(const std::string& text,
                  std::chrono::milliseconds timeout) const;

 private:
  std::vector<std::string> args_;
  std::map<std::string, std::string> env_;
  std::string log_path_;
  pid_t pid_ = -1;
};

// GetStatus on unix://<socket_path> with a short deadline and no waiting for
// the channel: whether the daemon answers right now.
grpc::Status GetStatusNow(const std::string& socket_path,
                          std::string* listen_address = nullptr,
                          std::string* database_path = nullptr);

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs `command` with /bin/sh.
CommandResult RunCommand(const std::string& command);
// Whether `program` is on $PATH.
bool HaveProgram(const std::string& program);

}  // namespace gputune::testing

#endif  // GPUTUNE_TESTS_DEPLOY_SERVICE_SUPPORT_H_
