#include "tests/support/daemon_process.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"

namespace gputune::testing {

DaemonProcess::DaemonProcess(std::vector<std::string> flags,
                             std::map<std::string, std::string> env,
                             std::function<void()> child_setup)
    : flags_(std::move(flags)),
      env_(std::move(env)),
      child_setup_(std::move(child_setup)) {
  char tmpl[] = "/tmp/gputune-test-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
  dir_ = tmpl;
  socket_path_ = dir_ + "/gputuned.sock";
  db_path_ = dir_ + "/gputuned.db";
  Start();
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) Kill();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Sh(const std::string& command, const std::string& log) {
  std::ofstream(log, std::ios::app) << "$ " << command << "\n";
  const std::string full = command + " >>'" + log + "' 2>&1";
  return std::system(full.c_str()) == 0;
}

std::string DaemonProcess::Log() const {
  std::ifstream in(log_path());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

pid_t SpawnGputuned(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env,
                    const std::string& log_path,
                    const std::function<void()>& child_setup) {
  std::vector<std::string> argv_storage = {GPUTUNED_PATH};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    freopen(log_path.c_str(), "a", stderr);
    freopen(log_path.c_str(), "a", stdout);
    for (const auto& [name, value] : env)
      setenv(name.c_str(), value.c_str(), 1);
    if (child_setup) child_setup();
    std::vector<char*> argv;
    for (auto& a : argv_storage) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

void DaemonProcess::Start() {
  std::vector<std::string> args = {"--listen=" + endpoint(),
                                   "--db=" + db_path_};
  args.insert(args.end(), flags_.begin(), flags_.end());
  const pid_t pid = SpawnGputuned(args, env_, log_path(), child_setup_);
  pid_ = pid;
  // Serving means: GetStatus answers.
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("gputuned exited at start:\n" + Log());
    }
    if (std::filesystem::exists(socket_path_)) {
      auto stub = Stub();
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(500));
      v1::GetStatusRequest req;
      v1::GetStatusResponse resp;
      if (stub->GetStatus(&ctx, req, &resp).ok()) return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Kill();
  throw std::runtime_error("gputuned did not serve within 20 s:\n" + Log());
}

int RunProgram(const std::string& path, const std::vector<std::string>& args,
               std::string* output, const std::function<void()>& child_setup) {
  char tmpl[] = "/tmp/gputune-run-XXXXXX";
  const int out_fd = mkstemp(tmpl);
  if (out_fd < 0) throw std::runtime_error("mkstemp failed");
  std::vector<std::string> argv_storage = {path};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    if (child_setup) child_setup();
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out_fd);
  int status = 0;
  waitpid(pid, &status, 0);
  std::ifstream in(tmpl);
  std::stringstream text;
  text << in.rdbuf();
  *output = text.str();
  unlink(tmpl);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int64_t RssKiB(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) {
      return std::strtoll(line.c_str() + 6, nullptr, 10);
    }
  }
  return -1;
}

int SignalAndReap(pid_t pid, int signal) {
  if (pid <= 0) return -1;
  kill(pid, signal);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

void DaemonProcess::Kill() {
  SignalAndReap(pid_, SIGKILL);
  pid_ = -1;
}

int DaemonProcess::Terminate() {
  const int status = SignalAndReap(pid_, SIGTERM);
  pid_ = -1;
  return status;
}

std::shared_ptr<grpc::Channel> DaemonProcess::Channel() const {
  return grpc::CreateChannel(endpoint(), grpc::InsecureChannelCredentials());
}

std::unique_ptr<v1::TuneService::Stub> DaemonProcess::Stub() const {
  return v1::TuneService::NewStub(Channel());
}

std::unique_ptr<v1::AdminService::Stub> DaemonProcess::AdminStub() const {
  return v1::AdminService::NewStub(Channel());
}

std::unique_ptr<grpc::ClientContext> Ctx(int seconds) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(seconds));
  return ctx;
}

v1::Key DenseKey(uint32_t m, uint32_t k, uint32_t n,
                 const std::string& candidate_set, const std::string& role) {
  v1::Key key;
  auto* d = key.mutable_dense_bf16();
  d->set_phase(m <= 16 ? v1::PHASE_DECODE : v1::PHASE_PREFILL);
  d->set_role(role);
  d->set_tokens(m);
  d->set_input_features(k);
  d->set_output_features(n);
  key.set_candidate_set(candidate_set);
  return key;
}

v1::Entry ImportFromOlderSoftware(v1::TuneService::Stub& stub,
                                  const v1::Key& key,
                                  const std::string& device_name) {
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::seconds(30));
    return c;
  };
  v1::GetStatusResponse status;
  if (grpc::Status s =
          stub.GetStatus(ctx().get(), v1::GetStatusRequest(), &status);
      !s.ok()) {
    throw std::runtime_error("GetStatus: " + s.error_message());
  }
  v1::ImportEntriesRequest req;
  v1::Entry& e = *req.add_entries();
  *e.mutable_key() = key;
  e.mutable_execution()->set_kernel("older.kernel");
  (*e.mutable_execution()->mutable_params())["tile"] = 32;
  e.set_source(v1::SOURCE_DAEMON_MEASURED);
  *e.mutable_fingerprint() = status.fingerprint();
  e.mutable_fingerprint()->set_kernel_version("0.0.1-older");
  if (!device_name.empty()) {
    e.mutable_fingerprint()->set_device_name(device_name);
  }
  v1::ImportEntriesResponse imported;
  if (grpc::Status s = stub.ImportEntries(ctx().get(), req, &imported);
      !s.ok()) {
    throw std::runtime_error("ImportEntries: " + s.error_message());
  }
  return e;
}

}  // namespace gputune::testing
