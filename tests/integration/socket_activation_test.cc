// Socket activation without systemd: the test does what systemd does for
// gputuned@N.socket (sd_listen_fds(3)): it binds and listens on a unix
// socket, then execs the real gputuned with the socket at descriptor 3,
// LISTEN_FDS=1 and LISTEN_PID set to the daemon's pid.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "grpcpp/client_context.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune {
namespace {

using testing::ReadFile;
using testing::SignalAndReap;
using testing::SpawnGputuned;

class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/gputune-activation-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp");
    path_ = tmpl;
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// What systemd makes from ListenStream=PATH, SocketMode=0660.
int ListeningSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(chmod(path.c_str(), 0660) == 0);
  REQUIRE(listen(fd, SOMAXCONN) == 0);
  return fd;
}

// Starts gputuned as systemd would start gputuned@0 for its socket: `fd` at
// descriptor 3, LISTEN_FDS=`count` and LISTEN_PID=its own pid.
pid_t SpawnActivated(const ScratchDir& dir, int fd, const char* count = "1",
                     std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--backend=none",
                                   "--db=" + dir.path() + "/gpu0.db"};
  args.insert(args.end(), extra.begin(), extra.end());
  return SpawnGputuned(
      args,
      {{"LISTEN_FDS", count},
       {"LISTEN_FDNAMES", "gputuned@0.socket"},
       // Where the service would bind its own socket: not used.
       {"RUNTIME_DIRECTORY", dir.path() + "/runtime"}},
      dir.path() + "/gputuned.log", [fd] {
        // Between fork and exec: async-signal-safe calls only (setenv is
        // what SpawnGputuned itself uses for the environment).
        if (fd == 3) {
          fcntl(3, F_SETFD, 0);
        } else {
          dup2(fd, 3);  // the copy has FD_CLOEXEC off
        }
        char pid[24];
        int n = 0;
        for (pid_t p = getpid(); p > 0; p /= 10) pid[n++] = '0' + p % 10;
        char text[24];
        for (int i = 0; i < n; ++i) text[i] = pid[n - 1 - i];
        text[n] = '\0';
        setenv("LISTEN_PID", text, 1);
      });
}

v1::GetStatusResponse Status(const std::string& socket_path, int seconds) {
  auto stub = v1::TuneService::NewStub(grpc::CreateChannel(
      "unix://" + socket_path, grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::seconds(seconds));
  ctx.set_wait_for_ready(true);
  v1::GetStatusResponse resp;
  const grpc::Status s = stub->GetStatus(&ctx, {}, &resp);
  INFO(s.error_message());
  REQUIRE(s.ok());
  return resp;
}

int WaitExit(pid_t pid, int seconds) {
  const auto give_up =
      std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < give_up) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  SignalAndReap(pid, SIGKILL);
  return -1;
}

TEST_CASE(
    "socket activation: gputuned serves the listening socket it is passed, "
    "and leaves the file to its owner") {
  ScratchDir dir;
  const std::string path = dir.path() + "/gpu0.sock";
  const int fd = ListeningSocket(path);
  struct stat before {};
  REQUIRE(stat(path.c_str(), &before) == 0);

  const pid_t pid = SpawnActivated(dir, fd);
  // No waiting for the daemon: the socket listens already, so the call waits
  // in its backlog until gputuned accepts it.
  v1::GetStatusResponse status = Status(path, 20);
  CHECK(status.listen_address() == "unix://" + path);
  CHECK(status.database_path() == dir.path() + "/gpu0.db");
  const std::string log = ReadFile(dir.path() + "/gputuned.log");
  INFO(log);
  CHECK(log.find("socket-activated: serving unix://" + path) !=
        std::string::npos);
  // It did not bind the socket it would have made itself.
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/runtime/gpu0.sock"));

  // SIGTERM: a clean exit that keeps the socket file (systemd removes it
  // with the socket unit), so the same socket serves the next start.
  int exit_status = SignalAndReap(pid, SIGTERM);
  CHECK(WIFEXITED(exit_status));
  CHECK(WEXITSTATUS(exit_status) == 0);
  struct stat after {};
  REQUIRE(stat(path.c_str(), &after) == 0);
  CHECK(after.st_ino == before.st_ino);
  CHECK((after.st_mode & 0777) == 0660);

  const pid_t again = SpawnActivated(dir, fd);
  status = Status(path, 20);
  CHECK(status.listen_address() == "unix://" + path);
  exit_status = SignalAndReap(again, SIGTERM);
  CHECK(WIFEXITED(exit_status));
  CHECK(WEXITSTATUS(exit_status) == 0);
  close(fd);
}

TEST_CASE(
    "socket activation: a passed descriptor that is not one listening unix "
    "socket is refused at start") {
  ScratchDir dir;
  const std::string log_path = dir.path() + "/gputuned.log";
  SECTION("a regular file") {
    const int file = open((dir.path() + "/not-a-socket").c_str(),
                          O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    REQUIRE(file >= 0);
    const int status = WaitExit(SpawnActivated(dir, file), 20);
    close(file);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(ReadFile(log_path).find(
              "the socket passed by systemd (LISTEN_FDS): descriptor 3 is "
              "not a listening unix stream socket") != std::string::npos);
  }
  SECTION("two sockets") {
    const int fd = ListeningSocket(dir.path() + "/gpu0.sock");
    const int status = WaitExit(SpawnActivated(dir, fd, "2"), 20);
    close(fd);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(ReadFile(log_path).find("systemd passed 2 sockets (LISTEN_FDS)") !=
          std::string::npos);
  }
  SECTION("with TLS") {
    const int fd = ListeningSocket(dir.path() + "/gpu0.sock");
    const int status =
        WaitExit(SpawnActivated(dir, fd, "1",
                                {"--tls_cert_file=/nonexistent/c.pem",
                                 "--tls_key_file=/nonexistent/k.pem"}),
                 20);
    close(fd);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 1);
    CHECK(
        ReadFile(log_path).find("TLS needs gputuned to bind its own socket") !=
        std::string::npos);
  }
}

}  // namespace
}  // namespace gputune
