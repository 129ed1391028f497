// The Debian packages: `cpack -G DEB` on this build tree, read back with
// dpkg-deb, checked by lintian, then installed, upgraded, removed and purged
// with dpkg into a scratch root (dpkg --root, maintainer scripts run with
// $DPKG_ROOT set; systemd is not asked, as it is not PID 1 there).
//
// One test case: packing takes a minute, and every check needs the packages.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "tests/deploy/service_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

// package name -> .deb
std::map<std::string, std::string> BuildPackages(const std::string& out) {
  const CommandResult built = RunCommand(
      std::string(GPUTUNE_CPACK_COMMAND) +
      " --config " GPUTUNE_BUILD_DIR "/CPackConfig.cmake -G DEB -B " + out);
  INFO(built.output);
  REQUIRE(built.exit_code == 0);
  std::map<std::string, std::string> debs;
  for (const auto& f : std::filesystem::directory_iterator(out)) {
    if (f.path().extension() != ".deb") continue;
    CommandResult name =
        RunCommand("dpkg-deb -f " + f.path().string() + " Package");
    REQUIRE(name.exit_code == 0);
    while (!name.output.empty() && name.output.back() == '\n') {
      name.output.pop_back();
    }
    debs[name.output] = f.path().string();
  }
  return debs;
}

std::string Field(const std::string& deb, const std::string& field) {
  std::string value = RunCommand("dpkg-deb -f " + deb + " " + field).output;
  while (!value.empty() && value.back() == '\n') value.pop_back();
  return value;
}

// The status of `package` in the dpkg database under `root` ("" if none).
std::string Installed(const std::string& root, const std::string& package) {
  const CommandResult r = RunCommand("dpkg-query --admindir=" + root +
                                     "/var/lib/dpkg -W -f='${Status} "
                                     "${Version}' " +
                                     package + " 2>/dev/null");
  return r.exit_code == 0 ? r.output : "";
}

void CheckContents(const std::map<std::string, std::string>& debs) {
  const std::string& daemon = debs.at("gputuned");
  const CommandResult listing = RunCommand("dpkg-deb -c " + daemon);
  INFO(listing.output);
  for (const char* path : {
           " ./usr/sbin/gputuned\n",
           " ./usr/bin/gputunectl\n",
           " ./usr/lib/systemd/system/gputuned@.service\n",
           " ./usr/lib/systemd/system/gputuned@.socket\n",
           " ./usr/lib/sysusers.d/gputune.conf\n",
           " ./usr/lib/tmpfiles.d/gputune.conf\n",
           " ./etc/gputune/gputuned.conf\n",
           " ./usr/share/doc/gputuned/operations.md\n",
           " ./usr/share/doc/gputuned/copyright\n",
           " ./usr/share/doc/gputuned/changelog.gz\n",
           " ./usr/share/man/man1/gputunectl.1.gz\n",
           " ./usr/share/man/man8/gputuned.8.gz\n",
           " ./usr/share/bash-completion/completions/gputunectl\n",
       }) {
    CHECK_THAT(listing.output, Catch::Contains(path));
  }
  // The daemon package holds no library or header: those are their own.
  CHECK_THAT(listing.output, !Catch::Contains("/include/"));
  CHECK_THAT(listing.output, !Catch::Contains("libgputune"));

  // The unit names the packaged binary and config whatever prefix this tree
  // was configured with.
  const CommandResult unit =
      RunCommand("dpkg-deb --fsys-tarfile " + daemon +
                 " | tar -xO ./usr/lib/systemd/system/gputuned@.service");
  CHECK_THAT(unit.output,
             Catch::Contains("\nExecStart=/usr/sbin/gputuned --device=%i "
                             "--config=/etc/gputune/gputuned.conf"));
  const CommandResult socket =
      RunCommand("dpkg-deb --fsys-tarfile " + daemon +
                 " | tar -xO ./usr/lib/systemd/system/gputuned@.socket");
  CHECK_THAT(socket.output,
             Catch::Contains("\nListenStream=/run/gputuned/gpu%i.sock\n"));
  CHECK_THAT(socket.output,
             Catch::Contains("\nDocumentation=file:///usr/share/doc/gputuned/"
                             "operations.md\n"));
  const std::string depends = Field(daemon, "Depends");
  for (const char* library :
       {"libgrpc++1.51", "libprotobuf32", "libsqlite3-0", "libspdlog1.10",
        "libsystemd0", "libabsl20220623"}) {
    CHECK_THAT(depends, Catch::Contains(library));
  }
  CHECK(RunCommand("dpkg-deb -I " + daemon + " conffiles").output ==
        "/etc/gputune/gputuned.conf\n");
  CHECK_THAT(Field(daemon, "Maintainer"), Catch::Contains("@"));
  // postinst makes the user and directories but starts nothing: the operator
  // chooses the GPUs.
  std::string postinst;  // its commands, without the comments
  std::istringstream script(
      RunCommand("dpkg-deb -I " + daemon + " postinst").output);
  for (std::string line; std::getline(script, line);) {
    if (line.find_first_not_of(' ') != line.find('#')) postinst += line + "\n";
  }
  CHECK_THAT(postinst, Catch::Contains("systemd-sysusers"));
  CHECK_THAT(postinst, Catch::Contains("systemd-tmpfiles"));
  CHECK_THAT(postinst, !Catch::Contains("systemctl enable"));
  CHECK_THAT(postinst, !Catch::Contains("systemctl start"));

  // The install component "client" (a whole client in one prefix, the same
  // files as these packages) is no package of its own.
  for (const auto& [name, path] : debs) {
    INFO(name);
    CHECK(std::set<std::string>{"gputuned", "gputuned-cuda", "libgputune0",
                                "libgputune-dev", "python3-gputune"}
              .count(name) == 1);
  }
  if (GPUTUNE_PACKAGES_LIBGPUTUNE) {
    REQUIRE(debs.count("libgputune0") == 1);
    REQUIRE(debs.count("libgputune-dev") == 1);
    const std::string lib =
        RunCommand("dpkg-deb -c " + debs.at("libgputune0")).output;
    INFO(lib);
    CHECK_THAT(lib, Catch::Contains("/libgputune.so.0 -> "));
    CHECK_THAT(lib,
               Catch::Contains("/libgputune.so." GPUTUNE_PROJECT_VERSION "\n"));
    CHECK_THAT(lib, Catch::Contains("/libgputune_api.so.0 -> "));
    CHECK_THAT(lib, !Catch::Contains("/libgputune.so -> "));  // -dev's
    CHECK_THAT(lib, !Catch::Contains("/include/"));
    CHECK(RunCommand("dpkg-deb -I " + debs.at("libgputune0") + " shlibs")
              .output.find("libgputune 0 libgputune0") != std::string::npos);
    const std::string dev =
        RunCommand("dpkg-deb -c " + debs.at("libgputune-dev")).output;
    INFO(dev);
    CHECK_THAT(dev, Catch::Contains(" ./usr/include/gputune/client.h\n"));
    CHECK_THAT(dev, Catch::Contains("/libgputune.so -> libgputune.so.0"));
    CHECK_THAT(dev, Catch::Contains("/pkgconfig/gputune.pc\n"));
    CHECK_THAT(dev, Catch::Contains("/cmake/gputune/gputuneConfig.cmake\n"));
    CHECK_THAT(Field(debs.at("libgputune-dev"), "Depends"),
               Catch::Contains("libgputune0 (= " GPUTUNE_PROJECT_VERSION ")"));
  }
  if (GPUTUNE_PACKAGES_CUDA_MODULE) {  // gputuned loads it for --backend=cuda
    REQUIRE(debs.count("gputuned-cuda") == 1);
    const std::string& cuda = debs.at("gputuned-cuda");
    const std::string files = RunCommand("dpkg-deb -c " + cuda).output;
    CHECK_THAT(files, Catch::Contains("/gputune/libgputune_cuda.so\n"));
    const std::string needs = Field(cuda, "Depends");
    CHECK_THAT(needs,
               Catch::Contains("gputuned (= " GPUTUNE_PROJECT_VERSION ")"));
    CHECK_THAT(needs, Catch::Contains("cuda-cudart-"));
    CHECK_THAT(needs, Catch::Contains("libcublas"));
    // No RUNPATH into /usr/local (Debian policy): the loader's paths find
    // CUDA.
    TempDir x;
    REQUIRE(RunCommand("dpkg-deb -x " + cuda + " " + x.path()).exit_code == 0);
    const CommandResult dynamic = RunCommand("readelf -d $(find " + x.path() +
                                             " -name libgputune_cuda.so)");
    CHECK_THAT(dynamic.output, !Catch::Contains("RUNPATH"));
    CHECK_THAT(dynamic.output, !Catch::Contains("RPATH"));
  }
}

void CheckLintian(const std::map<std::string, std::string>& debs) {
  if (!HaveProgram("lintian")) {
    WARN("skipped lintian: not installed (apt-get install lintian)");
    return;
  }
  std::string all;
  for (const auto& [name, deb] : debs) all += " " + deb;
  // Errors fail; warnings are listed (deploy/debian/README.md says which
  // remain and why).
  const CommandResult r =
      RunCommand("lintian --fail-on error --tag-display-limit 0" + all);
  INFO(r.output);
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.output, !Catch::Contains("E: "));
}

void CheckInstallUpgradePurge(const std::map<std::string, std::string>& debs,
                              const std::string& scratch) {
  if (geteuid() != 0) {
    WARN("skipped dpkg install: needs root (dpkg --root writes as root)");
    return;
  }
  const std::string root = scratch + "/root";
  for (const char* dir : {"/var/lib/dpkg/info", "/var/lib/dpkg/updates",
                          "/var/lib/dpkg/triggers", "/etc", "/run"}) {
    std::filesystem::create_directories(root + dir);
  }
  for (const char* file : {"/var/lib/dpkg/status", "/var/lib/dpkg/available"}) {
    std::ofstream(root + file).flush();
  }
  // Maintainer scripts run here, not chrooted, with DPKG_ROOT=<root>; the
  // libraries the packages depend on are this machine's, not the root's.
  const std::string dpkg = "dpkg --root=" + root +
                           " --force-script-chrootless --force-depends "
                           "--log=" +
                           scratch + "/dpkg.log ";

  // An older gputuned: the same files, version 0.0.9.
  const std::string old_dir = scratch + "/old";
  REQUIRE(RunCommand("dpkg-deb -R " + debs.at("gputuned") + " " + old_dir)
              .exit_code == 0);
  REQUIRE(RunCommand("sed -i 's/^Version: .*/Version: 0.0.9/' " + old_dir +
                     "/DEBIAN/control")
              .exit_code == 0);
  const std::string old_deb = scratch + "/gputuned_0.0.9.deb";
  REQUIRE(RunCommand("dpkg-deb -b " + old_dir + " " + old_deb).exit_code == 0);

  CommandResult r = RunCommand(dpkg + "-i " + old_deb);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(Installed(root, "gputuned"),
               Catch::StartsWith("install ok installed 0.0.9"));
  CHECK(std::filesystem::exists(root + "/usr/sbin/gputuned"));
  CHECK(std::filesystem::exists(root + "/etc/gputune/gputuned.conf"));
  if (HaveProgram("systemd-sysusers")) {  // the user, in the root's passwd
    CHECK_THAT(ReadFile(root + "/etc/passwd"), Catch::Contains("gputune:"));
    CHECK(std::filesystem::is_directory(root + "/var/lib/gputuned"));
  }
  // An operator's edit and a tune cache, which an upgrade must keep.
  std::filesystem::create_directories(root + "/var/lib/gputuned");
  std::ofstream(root + "/var/lib/gputuned/gpu0.db") << "cache";
  const std::string conf = root + "/etc/gputune/gputuned.conf";
  const std::string edited = ReadFile(conf) + "\nlog_level = debug\n";
  std::ofstream(conf) << edited;

  // Upgrade to this build, with the libraries.
  std::string current = " " + debs.at("gputuned");
  for (const char* p : {"libgputune0", "libgputune-dev"}) {
    if (debs.count(p)) current += " " + debs.at(p);
  }
  r = RunCommand(dpkg + "-i" + current);
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  REQUIRE_THAT(
      Installed(root, "gputuned"),
      Catch::StartsWith("install ok installed " GPUTUNE_PROJECT_VERSION));
  CHECK(ReadFile(conf) == edited);
  CHECK(std::filesystem::exists(root + "/var/lib/gputuned/gpu0.db"));
  if (debs.count("libgputune0")) {
    CHECK_THAT(Installed(root, "libgputune-dev"),
               Catch::StartsWith("install ok installed"));
  }
  // The installed binaries run and say what they are.
  CHECK_THAT(RunCommand(root + "/usr/sbin/gputuned --version").output,
             Catch::StartsWith("gputuned " GPUTUNE_PROJECT_VERSION " (git "));

  // Remove keeps the config and the cache; purge deletes both.
  r = RunCommand(dpkg + "-r gputuned");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(!std::filesystem::exists(root + "/usr/sbin/gputuned"));
  CHECK(std::filesystem::exists(conf));
  CHECK(std::filesystem::exists(root + "/var/lib/gputuned/gpu0.db"));
  r = RunCommand(dpkg + "-P gputuned");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK(Installed(root, "gputuned").find("installed") == std::string::npos);
  CHECK(!std::filesystem::exists(conf));
  CHECK(!std::filesystem::exists(root + "/var/lib/gputuned"));
}

TEST_CASE(
    "the Debian packages: split as Debian does, lintian-clean, and "
    "installed, upgraded and purged by dpkg") {
  if (!std::filesystem::exists(GPUTUNE_CPACK_COMMAND) ||
      !HaveProgram("dpkg-deb")) {
    WARN("skipped: cpack or dpkg-deb not found (apt-get install cmake dpkg)");
    return;
  }
  TempDir out;
  const std::map<std::string, std::string> debs = BuildPackages(out.path());
  REQUIRE(debs.count("gputuned") == 1);
  CheckContents(debs);
  CheckLintian(debs);
  CheckInstallUpgradePurge(debs, out.path());
}

}  // namespace
}  // namespace gputune::testing
