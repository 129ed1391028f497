// gputuned in the environment gputuned@.service gives it: no --listen or --db,
// $RUNTIME_DIRECTORY and $STATE_DIRECTORY shared by every instance, the
// socket mode clients rely on.
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>

#include "tests/deploy/service_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

using std::chrono::seconds;

// /run/gputuned and /var/lib/gputuned as systemd creates them (0750), under a
// temporary root.
class UnitDirectories {
 public:
  UnitDirectories()
      : runtime_(root_.path() + "/run/gputuned"),
        state_(root_.path() + "/var/lib/gputuned") {
    for (const std::string& dir : {runtime_, state_}) {
      std::filesystem::create_directories(dir);
      chmod(dir.c_str(), 0750);
    }
  }

  const std::string& root() const { return root_.path(); }
  const std::string& runtime() const { return runtime_; }
  const std::string& state() const { return state_; }
  std::string socket(int device) const {
    return runtime_ + "/gpu" + std::to_string(device) + ".sock";
  }
  std::string db(int device) const {
    return state_ + "/gpu" + std::to_string(device) + ".db";
  }

  // gputuned@<device> as the unit runs it (ExecStart's --device=%i and the
  // variables systemd sets), with `flags` added, notifying `notify`.
  Service Start(int device, const NotifySocket& notify,
                std::vector<std::string> flags = {}) const {
    const std::string log_dir = root() + "/log" + std::to_string(device);
    std::filesystem::create_directories(log_dir);
    std::vector<std::string> args = {"--device=" + std::to_string(device),
                                     "--backend=none"};
    args.insert(args.end(), flags.begin(), flags.end());
    return Service(args,
                   {{"RUNTIME_DIRECTORY", runtime_},
                    {"STATE_DIRECTORY", state_},
                    {"NOTIFY_SOCKET", notify.path()}},
                   log_dir);
  }

 private:
  TempDir root_;
  std::string runtime_;
  std::string state_;
};

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode;
}

TEST_CASE(
    "under systemd the socket is $RUNTIME_DIRECTORY/gpu<N>.sock and the "
    "database $STATE_DIRECTORY/gpu<N>.db") {
  UnitDirectories dirs;
  NotifySocket notify(dirs.root());
  Service daemon = dirs.Start(3, notify);
  const bool ready = notify.ReceiveUntil("READY=1", seconds(20)).has_value();
  INFO(daemon.Log());
  REQUIRE(ready);

  CHECK(S_ISSOCK(ModeOf(dirs.socket(3))));
  CHECK(std::filesystem::exists(dirs.db(3)));
  std::string listen;
  std::string db;
  REQUIRE(GetStatusNow(dirs.socket(3), &listen, &db).ok());
  CHECK(listen == "unix://" + dirs.socket(3));
  CHECK(db == dirs.db(3));
}

TEST_CASE("the socket has mode 0660 for the gputune group, or --socket_mode") {
  UnitDirectories dirs;
  NotifySocket notify(dirs.root());
  {
    Service daemon = dirs.Start(0, notify);
    REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
    CHECK((ModeOf(dirs.socket(0)) & 07777) == 0660);
    // The daemon leaves the directory as systemd made it (0750).
    CHECK((ModeOf(dirs.runtime()) & 07777) == 0750);
  }
  Service daemon = dirs.Start(1, notify, {"--socket_mode=0600"});
  REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
  CHECK((ModeOf(dirs.socket(1)) & 07777) == 0600);
}

TEST_CASE(
    "instances for two GPUs share the directories, and stopping one leaves "
    "the other serving") {
  UnitDirectories dirs;
  NotifySocket notify0(dirs.root(), "notify0.sock");
  NotifySocket notify1(dirs.root(), "notify1.sock");
  Service gpu0 = dirs.Start(0, notify0);
  Service gpu1 = dirs.Start(1, notify1);
  REQUIRE(notify0.ReceiveUntil("READY=1", seconds(20)));
  REQUIRE(notify1.ReceiveUntil("READY=1", seconds(20)));

  const int status = gpu0.Terminate();
  CHECK(WIFEXITED(status));
  CHECK_FALSE(std::filesystem::exists(dirs.socket(0)));
  CHECK(std::filesystem::exists(dirs.db(0)));
  INFO(gpu1.Log());
  CHECK(GetStatusNow(dirs.socket(1)).ok());
}

TEST_CASE(
    "a socket left behind by a killed daemon does not block its restart") {
  UnitDirectories dirs;
  NotifySocket notify(dirs.root());
  Service daemon = dirs.Start(0, notify);
  REQUIRE(notify.ReceiveUntil("READY=1", seconds(20)));
  daemon.Kill();
  REQUIRE(std::filesystem::exists(dirs.socket(0)));

  daemon.Start();  // what Restart=on-failure does
  const bool ready = notify.ReceiveUntil("READY=1", seconds(20)).has_value();
  INFO(daemon.Log());
  REQUIRE(ready);
  CHECK(GetStatusNow(dirs.socket(0)).ok());
}

}  // namespace
}  // namespace gputune::testing
