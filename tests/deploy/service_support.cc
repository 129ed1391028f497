#include "tests/deploy/service_support.h"

#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "gputune/v1/tune.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/support/daemon_process.h"
#include "tests/support/sanitized.h"

namespace gputune::testing {

TempDir::TempDir() {
  char tmpl[] = "/tmp/gputune-deploy-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

bool Notification::Has(const std::string& line) const {
  std::istringstream lines(text);
  for (std::string l; std::getline(lines, l);) {
    if (l == line) return true;
  }
  return false;
}

std::string Notification::Field(const std::string& name) const {
  std::istringstream lines(text);
  const std::string prefix = name + "=";
  for (std::string l; std::getline(lines, l);) {
    if (l.rfind(prefix, 0) == 0) return l.substr(prefix.size());
  }
  return "";
}

NotifySocket::NotifySocket(const std::string& dir, const std::string& name)
    : path_(dir + "/" + name) {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd_ < 0 || path_.size() >= sizeof(addr.sun_path)) {
    throw std::runtime_error("cannot create the notify socket " + path_);
  }
  std::strcpy(addr.sun_path, path_.c_str());
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    throw std::runtime_error("cannot bind " + path_ + ": " +
                             std::strerror(errno));
  }
}

NotifySocket::~NotifySocket() {
  if (fd_ >= 0) close(fd_);
  unlink(path_.c_str());
}

std::optional<Notification> NotifySocket::Receive(
    std::chrono::milliseconds timeout) {
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return std::nullopt;
  char buffer[4096];
  const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
  if (n < 0) return std::nullopt;
  return Notification{std::string(buffer, n), std::chrono::steady_clock::now()};
}

std::optional<Notification> NotifySocket::ReceiveUntil(
    const std::string& line, std::chrono::milliseconds timeout,
    std::vector<Notification>* before) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        give_up - std::chrono::steady_clock::now());
    if (left.count() <= 0) return std::nullopt;
    std::optional<Notification> n = Receive(left);
    if (!n) return std::nullopt;
    if (n->Has(line)) return n;
    if (before != nullptr) before->push_back(*n);
  }
}

Service::Service(std::vector<std::string> args,
                 std::map<std::string, std::string> env,
                 const std::string& log_dir)
    : args_(std::move(args)),
      env_(std::move(env)),
      log_path_(log_dir + "/gputuned.log") {
  Start();
}

Service::~Service() { Kill(); }

void Service::Start() { pid_ = SpawnGputuned(args_, env_, log_path_); }

int Service::Terminate() {
  const int status = SignalAndReap(pid_, SIGTERM);
  pid_ = -1;
  return status;
}

void Service::Kill() {
  SignalAndReap(pid_, SIGKILL);
  pid_ = -1;
}

void Service::Signal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

std::string Service::Log() const { return ReadFile(log_path_); }

bool Service::WaitForLog(const std::string& text,
                         std::chrono::milliseconds timeout) const {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (Log().find(text) == std::string::npos) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

grpc::Status GetStatusNow(const std::string& socket_path,
                          std::string* listen_address,
                          std::string* database_path) {
  auto stub = v1::TuneService::NewStub(grpc::CreateChannel(
      "unix://" + socket_path, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  // Generous: without wait_for_ready a daemon not listening fails at once;
  // the deadline only bounds a slow answer on a loaded machine.
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(30 * kSlowdown));
  v1::GetStatusRequest request;
  v1::GetStatusResponse response;
  grpc::Status status = stub->GetStatus(&ctx, request, &response);
  if (listen_address != nullptr) *listen_address = response.listen_address();
  if (database_path != nullptr) *database_path = response.database_path();
  return status;
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t n = 0;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) {
    result.output.append(buffer, n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool HaveProgram(const std::string& program) {
  return RunCommand("command -v " + program).exit_code == 0;
}

}  // namespace gputune::testing
