// The Debian package: `cpack -G DEB` on this build tree, read back with
// dpkg-deb. Installing it needs root and a disposable system, so that is not
// done here (docs/operations.md shows a real install).
#include <filesystem>
#include <sstream>

#include "tests/deploy/service_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

TEST_CASE(
    "cpack -G DEB builds gputune.deb with the daemon, unit, user, "
    "directories, config and docs") {
  if (!std::filesystem::exists(GPUTUNE_CPACK_COMMAND) ||
      !HaveProgram("dpkg-deb")) {
    WARN("skipped: cpack or dpkg-deb not found (apt-get install cmake dpkg)");
    return;
  }
  TempDir out;
  const CommandResult built = RunCommand(std::string(GPUTUNE_CPACK_COMMAND) +
                                         " --config " GPUTUNE_BUILD_DIR
                                         "/CPackConfig.cmake -G DEB -B " +
                                         out.path());
  INFO(built.output);
  REQUIRE(built.exit_code == 0);
  std::string deb;
  for (const auto& f : std::filesystem::directory_iterator(out.path())) {
    if (f.path().extension() == ".deb") deb = f.path().string();
  }
  REQUIRE_THAT(deb, Catch::Contains("/gputune_"));

  const CommandResult listing = RunCommand("dpkg-deb -c " + deb);
  INFO(listing.output);
  REQUIRE(listing.exit_code == 0);
  for (const char* path : {
           " ./usr/sbin/gputuned\n",
           " ./usr/lib/systemd/system/gputuned@.service\n",
           " ./usr/lib/sysusers.d/gputune.conf\n",
           " ./usr/lib/tmpfiles.d/gputune.conf\n",
           " ./etc/gputune/gputuned.conf\n",
           " ./usr/share/doc/gputune/operations.md\n",
       }) {
    CHECK_THAT(listing.output, Catch::Contains(path));
  }
  if (GPUTUNE_PACKAGES_GPUTUNECTL) {
    CHECK_THAT(listing.output, Catch::Contains(" ./usr/bin/gputunectl\n"));
  }
  if (GPUTUNE_PACKAGES_CUDA_MODULE) {  // gputuned loads it for --backend=cuda
    CHECK_THAT(listing.output,
               Catch::Contains("/gputune/libgputune_cuda.so\n"));
  }
  if (GPUTUNE_PACKAGES_LIBGPUTUNE) {
    CHECK_THAT(listing.output, Catch::Contains("/libgputune"));
    CHECK_THAT(listing.output, Catch::Contains(" ./usr/include/"));
    CHECK_THAT(listing.output, Catch::Contains(".pc\n"));
    CHECK_THAT(listing.output, Catch::Contains("onfig.cmake\n"));
  }

  // The unit names the packaged binary and config whatever prefix this tree
  // was configured with.
  const CommandResult unit =
      RunCommand("dpkg-deb --fsys-tarfile " + deb +
                 " | tar -xO ./usr/lib/systemd/system/gputuned@.service");
  CHECK_THAT(unit.output,
             Catch::Contains("\nExecStart=/usr/sbin/gputuned --device=%i "
                             "--config=/etc/gputune/gputuned.conf"));

  const CommandResult control =
      RunCommand("dpkg-deb -f " + deb + " Package Depends");
  INFO(control.output);
  CHECK_THAT(control.output, Catch::StartsWith("Package: gputune\n"));
  for (const char* library :
       {"libgrpc++1.51", "libprotobuf32", "libsqlite3-0", "libspdlog1.10",
        "libsystemd0", "libabsl20220623"}) {
    CHECK_THAT(control.output, Catch::Contains(library));
  }
  CHECK(RunCommand("dpkg-deb -I " + deb + " conffiles").output ==
        "/etc/gputune/gputuned.conf\n");
  // postinst makes the user and directories but starts nothing: the operator
  // chooses the GPUs.
  std::string postinst;  // its commands, without the comments
  std::istringstream script(
      RunCommand("dpkg-deb -I " + deb + " postinst").output);
  for (std::string line; std::getline(script, line);) {
    if (line.find_first_not_of(' ') != line.find('#')) postinst += line + "\n";
  }
  CHECK_THAT(postinst, Catch::Contains("systemd-sysusers"));
  CHECK_THAT(postinst, Catch::Contains("systemd-tmpfiles"));
  CHECK_THAT(postinst, !Catch::Contains("systemctl enable"));
  CHECK_THAT(postinst, !Catch::Contains("systemctl start"));
}

}  // namespace
}  // namespace gputune::testing
