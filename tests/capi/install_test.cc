// The C API as an outside project uses it: installed with cmake --install
// into a temporary prefix, a C11 program built with cc and pkg-config
// gputune-c (no gRPC, protobuf or Abseil header reachable from it), run
// against a daemon.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune::testing {
namespace {

// A daemon, and the build installed into dir/prefix as the README does it
// (the component "client": libraries, headers, CMake and pkg-config files,
// gputunectl; libgputune_dense too where CUDA is built), with any other
// components asked for; commands' output goes to dir/<log>.
struct Installed {
  explicit Installed(const std::string& log_name,
                     std::vector<std::string> components = {"client"})
      : daemon({"--backend=none"}),
        dir(daemon.dir()),
        prefix(dir + "/prefix"),
        log(dir + "/" + log_name) {
    for (const std::string& component : components) {
      if (!Sh(std::string(GPUTUNE_CMAKE_COMMAND) +
                  " --install '" GPUTUNE_BUILD_DIR "' --component " +
                  component + " --prefix '" + prefix + "'",
              log)) {
        FAIL(ReadFile(log));
      }
    }
  }
  DaemonProcess daemon;
  const std::string dir;
  const std::string prefix;
  const std::string log;
};

TEST_CASE("a C11 program builds against the installed C API and runs") {
  Installed installed("install.log");
  const std::string& dir = installed.dir;
  const std::string& prefix = installed.prefix;
  const std::string& log = installed.log;
  DaemonProcess& daemon = installed.daemon;
  for (const char* path : {"include/gputune/gputune.h",
                           "lib/pkgconfig/gputune-c.pc", "lib/libgputune.so"}) {
    INFO(path);
    REQUIRE(std::filesystem::exists(prefix + "/" + path));
  }
#if GPUTUNE_TEST_WITH_CUDA
  REQUIRE(std::filesystem::exists(prefix + "/include/gputune/dense_runner.h"));
  REQUIRE(std::filesystem::exists(prefix + "/lib/libgputune_dense.so.0"));
#else
  REQUIRE_FALSE(
      std::filesystem::exists(prefix + "/include/gputune/dense_runner.h"));
#endif

  const std::string pc =
      "PKG_CONFIG_PATH='" + prefix + "/lib/pkgconfig' pkg-config gputune-c";
  const std::string source = GPUTUNE_SOURCE_DIR "/client/examples/c/example.c";
  const std::string flags = "-std=c11 -Wall -Wextra -pedantic -Werror";
  // The headers the program's compilation opens: gputune.h and the C
  // library's, none of gRPC, protobuf or Abseil.
  const std::string deps = dir + "/example.d";
  bool ok = Sh("cc " + flags + " -M -MF '" + deps + "' '" + source + "' $(" +
                   pc + " --cflags)",
               log);
  if (!ok) FAIL(ReadFile(log));
  const std::string headers = ReadFile(deps);
  INFO(headers);
  REQUIRE(headers.find("gputune/gputune.h") != std::string::npos);
  for (const char* forbidden : {"absl/", "google/protobuf", "grpc", "c++"}) {
    REQUIRE(headers.find(forbidden) == std::string::npos);
  }
  ok = Sh("cc " + flags + " '" + source + "' -o '" + dir + "/example' $(" + pc +
              " --cflags --libs) -Wl,-rpath,'" + prefix + "/lib'",
          log) &&
       Sh("'" + dir + "/example' " + daemon.endpoint(), log);
  if (!ok) FAIL(ReadFile(log));
  std::string out = ReadFile(log);
  REQUIRE(out.find("tuned example_attention/b=8,h=32,d=128@example-c") !=
          std::string::npos);
  REQUIRE(out.find("lookup: hit (memo), run example.flash_decode "
                   "block_n=64 split_kv=4") != std::string::npos);
  // A second run finds what the first recorded.
  REQUIRE(Sh("'" + dir + "/example' " + daemon.endpoint(), log));
  REQUIRE(ReadFile(log).find("claim outcome 3") != std::string::npos);
}

TEST_CASE("the installed Python package finds the installed libgputune") {
  // python3-gputune's component, beside the client.
  Installed installed("python.log", {"client", "python"});
  const std::string& dir = installed.dir;
  const std::string& prefix = installed.prefix;
  const std::string& log = installed.log;
  DaemonProcess& daemon = installed.daemon;
  const std::string site = prefix + "/lib/python3/dist-packages";
  REQUIRE(std::filesystem::exists(site + "/gputune/client.py"));
  // No GPUTUNE_LIBRARY, no LD_LIBRARY_PATH: the package finds
  // <prefix>/lib/libgputune.so.0 from where it was installed.
  const std::string run =
      "cd '" + dir +
      "' && env -u GPUTUNE_LIBRARY -u LD_LIBRARY_PATH "
      "PYTHONPATH='" +
      site +
      "' /usr/bin/python3 -c \"import gputune, sys; "
      "print(gputune._capi.load()._name); "
      "print(gputune.Client(sys.argv[1]).lookup('py/x=1@v1').state)\" " +
      daemon.endpoint();
  if (!Sh(run, log)) FAIL(ReadFile(log));
  const std::string out = ReadFile(log);
  REQUIRE(out.find(prefix + "/lib/libgputune.so.0") != std::string::npos);
  REQUIRE(out.find("MISS") != std::string::npos);
}

TEST_CASE("pip installs the Python package offline and it loads the install") {
  // The README's lines: the client into a prefix, the package with pip
  // (offline, no build isolation: Debian's setuptools and wheel build it),
  // GPUTUNE_LIBRARY naming the installed library.
  Installed installed("pip.log");
  const std::string& dir = installed.dir;
  const std::string& log = installed.log;
  // From a copy: setuptools writes build/ and *.egg-info into the tree.
  const std::string install =
      "cp -r '" GPUTUNE_SOURCE_DIR "/python' '" + dir + "/python' && cd '" +
      dir +
      "' && /usr/bin/python3 -m pip install --no-index --no-build-isolation "
      "--no-deps --disable-pip-version-check --target site ./python";
  const std::string run =
      "cd '" + dir + "' && env -u LD_LIBRARY_PATH GPUTUNE_LIBRARY='" +
      installed.prefix +
      "/lib/libgputune.so.0' PYTHONPATH=site /usr/bin/python3 -c 'import "
      "gputune, sys; print(gputune._capi.load()._name, \"version\", "
      "gputune.Client(sys.argv[1]).status()[\"version\"])' " +
      installed.daemon.endpoint();
  if (!Sh(install, log) || !Sh(run, log)) FAIL(ReadFile(log));
  const std::string out = ReadFile(log);
  REQUIRE(out.find(installed.prefix + "/lib/libgputune.so.0 version ") !=
          std::string::npos);
}

// Debian's cargo (what scripts/install-deps.sh installs), else the first on
// PATH; empty when there is none. Looked up when the test runs, not when the
// build is configured: scripts/test.sh installs the test dependencies while
// the build runs.
std::string FindCargo() {
  std::vector<std::string> dirs = {"/usr/bin"};
  if (const char* path = std::getenv("PATH")) {
    std::stringstream in(path);
    for (std::string dir; std::getline(in, dir, ':');) dirs.push_back(dir);
  }
  for (const std::string& dir : dirs) {
    const std::filesystem::path cargo = std::filesystem::path(dir) / "cargo";
    std::error_code error;
    if (!dir.empty() && std::filesystem::is_regular_file(cargo, error)) {
      return cargo.string();
    }
  }
  return "";
}

TEST_CASE("the Rust example builds with cargo offline against the install") {
  const std::string cargo = FindCargo();
  if (cargo.empty()) {
    SUCCEED("skipped: no cargo (scripts/install-deps.sh installs Debian's)");
    return;
  }
  Installed installed("rust.log");
  const std::string& dir = installed.dir;
  const std::string& prefix = installed.prefix;
  const std::string& log = installed.log;
  DaemonProcess& daemon = installed.daemon;
  // The crate's own directory stays clean: target and lock file go to dir.
  const std::string build =
      "cp -r '" GPUTUNE_SOURCE_DIR "/client/examples/rust' '" + dir +
      "/crate' && cd '" + dir + "/crate' && GPUTUNE_LIB_DIR='" + prefix +
      "/lib' CARGO_TARGET_DIR='" + dir + "/target' '" + cargo +
      "' build --offline --quiet";
  const std::string run =
      "'" + dir + "/target/debug/gputune-example' " + daemon.endpoint();
  if (!Sh(build, log) || !Sh(run, log)) FAIL(ReadFile(log));
  std::string out = ReadFile(log);
  REQUIRE(out.find("from Rust") != std::string::npos);
  REQUIRE(out.find("tuned example_attention/b=8,h=32,d=128@example-rust") !=
          std::string::npos);
  REQUIRE(out.find("lookup: hit (memo), run example.flash_decode") !=
          std::string::npos);
  REQUIRE(Sh(run, log));
  REQUIRE(ReadFile(log).find("claim outcome 3") != std::string::npos);
}

}  // namespace
}  // namespace gputune::testing
