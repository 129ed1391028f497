// deploy/'s systemd files as `cmake --install` lays them out, checked with
// systemd's own tools. systemd is not PID 1 here: nothing is started through
// systemctl; the daemon side of the unit is covered by notify_test.cc and
// service_environment_test.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <regex>

#include "tests/deploy/service_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

// gputuned and its service files installed under a temporary prefix.
class InstalledTree {
 public:
  InstalledTree() {
    // The default component: gputuned and deploy/'s files (the client
    // library is the components libgputune0 and dev).
    const CommandResult r = RunCommand(std::string(GPUTUNE_CMAKE_COMMAND) +
                                       " --install " GPUTUNE_BUILD_DIR
                                       " --component Unspecified --prefix " +
                                       prefix());
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
  }

  const std::string& prefix() const { return dir_.path(); }
  std::string unit() const {
    return prefix() + "/lib/systemd/system/gputuned@.service";
  }
  std::string socket_unit() const {
    return prefix() + "/lib/systemd/system/gputuned@.socket";
  }
  std::string sysusers() const {
    return prefix() + "/lib/sysusers.d/gputune.conf";
  }
  std::string tmpfiles() const {
    return prefix() + "/lib/tmpfiles.d/gputune.conf";
  }

 private:
  TempDir dir_;
};

// Catch2 v2 has no SKIP: say why and pass.
#define SKIP_UNLESS(condition, why) \
  if (!(condition)) {               \
    WARN("skipped: " << why);       \
    return;                         \
  }

TEST_CASE("systemd-analyze verify accepts gputuned@.service as installed") {
  SKIP_UNLESS(HaveProgram("systemd-analyze"),
              "systemd-analyze not found (apt-get install systemd)");
  InstalledTree tree;
  TempDir instances;
  const std::string instance = instances.path() + "/gputuned@0.service";
  std::filesystem::copy_file(tree.unit(), instance);

  for (const std::string& unit : {tree.unit(), instance}) {
    // verify exits 0 on unknown or misspelt settings too, so its output must
    // be empty: no warnings at all.
    const CommandResult r = RunCommand("systemd-analyze verify " + unit);
    INFO(unit << ":\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.empty());
  }
}

TEST_CASE(
    "systemd-analyze verify accepts gputuned@.socket with its service, and "
    "the socket is the one the service would bind") {
  InstalledTree tree;
  const std::string socket = ReadFile(tree.socket_unit());
  // Where the service binds it itself ($RUNTIME_DIRECTORY/gpu%i.sock), with
  // gputuned's own mode and group: clients see no difference.
  CHECK_THAT(socket,
             Catch::Contains("\nListenStream=/run/gputuned/gpu%i.sock\n"));
  CHECK_THAT(ReadFile(tree.unit()),
             Catch::Contains("\nRuntimeDirectory=gputuned\n"));
  CHECK_THAT(socket, Catch::Contains("\nSocketMode=0660\n"));
  CHECK_THAT(socket, Catch::Contains("\nSocketGroup=gputune\n"));
  CHECK_THAT(socket, Catch::Contains("\nAccept=no\n"));
  CHECK_THAT(socket, Catch::Contains("\nDocumentation=file://" + tree.prefix() +
                                     "/share/doc/gputuned/operations.md\n"));
  SKIP_UNLESS(HaveProgram("systemd-analyze"),
              "systemd-analyze not found (apt-get install systemd)");
  // An instance pair: verify loads the service the socket starts.
  TempDir instances;
  const std::string instance = instances.path() + "/gputuned@0.socket";
  std::filesystem::copy_file(tree.socket_unit(), instance);
  std::filesystem::copy_file(tree.unit(),
                             instances.path() + "/gputuned@0.service");
  for (const std::string& unit : {tree.socket_unit(), instance}) {
    const CommandResult r = RunCommand("systemd-analyze verify " + unit);
    INFO(unit << ":\n" << r.output);
    CHECK(r.exit_code == 0);
    CHECK(r.output.empty());
  }
}

TEST_CASE(
    "the unit gives gputuned room for many client connections "
    "(LimitNOFILE)") {
  InstalledTree tree;
  const std::string unit = ReadFile(tree.unit());
  std::smatch limit;
  REQUIRE(std::regex_search(unit, limit, std::regex("\nLimitNOFILE=(\\d+)\n")));
  CHECK(std::stoi(limit[1]) >= 65536);
}

TEST_CASE(
    "the installed unit runs the installed gputuned with a config it accepts") {
  InstalledTree tree;
  const std::string unit = ReadFile(tree.unit());
  std::smatch exec;
  REQUIRE(std::regex_search(unit, exec, std::regex("\nExecStart=([^\n]*)")));
  std::string command = exec[1];
  CHECK_THAT(command, Catch::StartsWith(tree.prefix() + "/sbin/gputuned "));
  CHECK_THAT(command, Catch::Contains("--device=%i"));
  CHECK_THAT(command, Catch::Contains("--config=" + tree.prefix() +
                                      "/etc/gputune/gputuned.conf"));
  // What systemd would run for gputuned@0 with no gpu0.env; --help parses the
  // config file before it prints, and exits 0 only if the file is good.
  command = std::regex_replace(command, std::regex("%i"), "0");
  command = std::regex_replace(command, std::regex(R"(\$GPUTUNED_ARGS)"), "");
  const CommandResult r = RunCommand(command + " --help");
  INFO(command << "\n" << r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::StartsWith("usage: gputuned"));
}

TEST_CASE("the installed example config shows the daemon's own defaults") {
  InstalledTree tree;
  const std::string help =
      RunCommand(tree.prefix() + "/sbin/gputuned --help").output;
  // "  --name\n      help text [default: value]"
  std::map<std::string, std::string> defaults;
  const std::regex option(R"(\n  --([a-z_]+)\n[^\n]*\[default: ([^\]]*)\])");
  for (std::sregex_iterator it(help.begin(), help.end(), option), end;
       it != end; ++it) {
    defaults[(*it)[1]] = (*it)[2];
  }
  REQUIRE(defaults.size() > 10);

  const std::string config =
      ReadFile(tree.prefix() + "/etc/gputune/gputuned.conf");
  const std::regex setting(R"((^|\n)# ([a-z_]+) = ([^\n]*))");
  int shown = 0;
  for (std::sregex_iterator it(config.begin(), config.end(), setting), end;
       it != end; ++it, ++shown) {
    const std::string name = (*it)[2];
    INFO(name);
    REQUIRE(defaults.count(name) == 1);
    CHECK((*it)[3] == defaults[name]);
  }
  CHECK(shown > 10);
}

TEST_CASE(
    "systemd-analyze security rates the unit's exposure at 3.0 or lower") {
  SKIP_UNLESS(HaveProgram("systemd-analyze"),
              "systemd-analyze not found (apt-get install systemd)");
  InstalledTree tree;
  const CommandResult r = RunCommand(
      "systemd-analyze security --offline=true --threshold=30 " + tree.unit());
  INFO(r.output);
  CHECK(r.exit_code == 0);
}

TEST_CASE(
    "sysusers.d and tmpfiles.d make the gputune user and its 0750 "
    "directories") {
  SKIP_UNLESS(
      HaveProgram("systemd-sysusers") && HaveProgram("systemd-tmpfiles"),
      "systemd-sysusers or systemd-tmpfiles not found (apt-get install "
      "systemd)");
  SKIP_UNLESS(geteuid() == 0, "needs root to give files to the gputune user");
  InstalledTree tree;
  // An empty system image holding the two files where the package puts them;
  // both tools run as postinst runs them, by file name.
  TempDir root;
  for (const auto& [file, dir] :
       {std::pair{tree.sysusers(), "/usr/lib/sysusers.d"},
        std::pair{tree.tmpfiles(), "/usr/lib/tmpfiles.d"}}) {
    std::filesystem::create_directories(root.path() + dir);
    std::filesystem::copy_file(file, root.path() + dir + "/gputune.conf");
  }
  std::filesystem::create_directories(root.path() + "/etc");
  CommandResult r =
      RunCommand("systemd-sysusers --root=" + root.path() + " gputune.conf");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::smatch user;
  const std::string passwd = ReadFile(root.path() + "/etc/passwd");
  REQUIRE(std::regex_search(passwd, user,
                            std::regex(R"((^|\n)gputune:x:(\d+):(\d+):)")));
  const std::string uid = user[2];
  const std::string gid = user[3];
  CHECK(std::regex_search(ReadFile(root.path() + "/etc/group"),
                          std::regex("(^|\n)gputune:x:" + gid + ":")));

  r = RunCommand("systemd-tmpfiles --root=" + root.path() +
                 " --create gputune.conf");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  for (const char* dir : {"/run/gputuned", "/var/lib/gputuned"}) {
    struct stat st {};
    INFO(dir);
    REQUIRE(stat((root.path() + dir).c_str(), &st) == 0);
    CHECK(S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 07777) == 0750);
    CHECK(st.st_uid == std::stoul(uid));
    CHECK(st.st_gid == std::stoul(gid));
  }
}

}  // namespace
}  // namespace gputune::testing
