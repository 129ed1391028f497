// The example program (client/examples), in the tree and built against an
// installed gputune (CMake package and pkg-config), run against a daemon.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/client/client_test_support.h"
#include "tests/support/catch.h"

namespace gputune::testing {
namespace {

TEST_CASE("the example program runs against a daemon") {
  DaemonProcess daemon({"--backend=none"});
  const std::string log = daemon.dir() + "/example.log";
  REQUIRE(Sh(std::string(GPUTUNE_EXAMPLE_PATH) + " " + daemon.endpoint(), log));
  const std::string out = ReadFile(log);
  REQUIRE(out.find("tuned example_attention/") != std::string::npos);
  REQUIRE(out.find("lookup: hit (memo)") != std::string::npos);
  // A second run finds the entry the first recorded.
  REQUIRE(Sh(std::string(GPUTUNE_EXAMPLE_PATH) + " " + daemon.endpoint(), log));
  REQUIRE(ReadFile(log).find("CLAIM_OUTCOME_HIT") != std::string::npos);
}

TEST_CASE("the example builds against the installed package and runs") {
  DaemonProcess daemon({"--backend=none"});
  const std::string dir = daemon.dir();
  const std::string prefix = dir + "/prefix";
  const std::string log = dir + "/install.log";
  INFO("log: " << log);
  const std::string cmake = GPUTUNE_CMAKE_COMMAND;
  // The README's install line: the component "client" alone is a whole
  // client (what the packages libgputune0, libgputune-dev and gputunectl's
  // hold).
  bool ok = Sh(cmake +
                   " --install '" GPUTUNE_BUILD_DIR
                   "' --component client --prefix '" +
                   prefix + "'",
               log);
  // The installed tree: headers, both libraries (the links and the files
  // they point to: exists() follows links), package files, gputunectl and
  // gputune-sync.
  for (const char* path :
       {"include/gputune/client.h", "include/gputune/v1/tune.pb.h",
        "include/gputune/v1/tune.grpc.pb.h",
        "include/gputune/proto/key_format.h", "include/gputune/gputune.h",
        GPUTUNE_INSTALL_LIBDIR "/cmake/gputune/gputuneConfig.cmake",
        GPUTUNE_INSTALL_LIBDIR "/pkgconfig/gputune.pc",
        GPUTUNE_INSTALL_LIBDIR "/pkgconfig/gputune-c.pc",
        GPUTUNE_INSTALL_LIBDIR "/libgputune.so",
        GPUTUNE_INSTALL_LIBDIR "/libgputune.so.0",
        GPUTUNE_INSTALL_LIBDIR "/libgputune_api.so",
        GPUTUNE_INSTALL_LIBDIR "/libgputune_api.so.0", "bin/gputunectl",
        "bin/gputune-sync"}) {
    INFO(path);
    CHECK(std::filesystem::exists(prefix + "/" + path));
  }
  // The client's header needs the messages and Abseil, not gRPC: -H lists
  // every header a file includes.
  const std::string headers = dir + "/client_h_headers.txt";
  ok = ok && Sh("(echo '#include <gputune/client.h>' | c++ -std=c++17 -x "
                "c++ -fsyntax-only -H -I'" +
                    prefix + "/include' - 2>'" + headers + "')",
                log);
  const std::string included = ReadFile(headers);
  CHECK(included.find("gputune/client.h") != std::string::npos);
  CHECK(included.find("gputune/v1/tune.pb.h") != std::string::npos);
  CHECK(included.find("grpcpp/") == std::string::npos);
  CHECK(included.find("/grpc/") == std::string::npos);
  CHECK(included.find("tune.grpc.pb.h") == std::string::npos);
  ok = ok &&
       Sh(cmake + " -S '" GPUTUNE_SOURCE_DIR "/client/examples' -B '" + dir +
              "/example' -G '" GPUTUNE_CMAKE_GENERATOR
              "' -DCMAKE_CXX_COMPILER='" GPUTUNE_CXX_COMPILER
              "' -DCMAKE_CXX_FLAGS='" GPUTUNE_SANITIZE_FLAGS
              "' -DCMAKE_EXE_LINKER_FLAGS='" GPUTUNE_SANITIZE_FLAGS
              "' -DCMAKE_PREFIX_PATH='" +
              prefix + "'",
          log);
  ok = ok && Sh(cmake + " --build '" + dir + "/example'", log);
  ok = ok &&
       Sh("'" + dir + "/example/gputune_example' " + daemon.endpoint(), log);
  if (!ok) FAIL(ReadFile(log));
  REQUIRE(ReadFile(log).find("lookup: hit (memo)") != std::string::npos);

  SECTION("and its gputunectl answers status") {
    ok = Sh("'" + prefix + "/bin/gputunectl' --endpoint=" + daemon.endpoint() +
                " status",
            log);
    if (!ok) FAIL(ReadFile(log));
    CHECK(ReadFile(log).find("backend") != std::string::npos);
  }

  SECTION("and with pkg-config") {
    const std::string pc = "PKG_CONFIG_PATH='" + prefix +
                           "/" GPUTUNE_INSTALL_LIBDIR
                           "/pkgconfig' pkg-config gputune";
    ok =
        Sh(pc + " --exists --print-errors", log) &&
        Sh("'" GPUTUNE_CXX_COMPILER "' " GPUTUNE_SANITIZE_FLAGS
           " -std=c++17 '" GPUTUNE_SOURCE_DIR
           "/client/examples/example.cc' -o '" +
               dir + "/example_pc' $(" + pc + " --cflags --libs) -Wl,-rpath,'" +
               prefix + "/" GPUTUNE_INSTALL_LIBDIR "'",
           log) &&
        Sh("'" + dir + "/example_pc' " + daemon.endpoint(), log);
    if (!ok) FAIL(ReadFile(log));
  }
}

}  // namespace
}  // namespace gputune::testing
