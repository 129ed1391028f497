// gputuned's settings: flags, config file, systemd directories.
#include "daemon/config.h"

#include <stdlib.h>

#include <fstream>
#include <map>

#include "tests/support/catch.h"

namespace gputune {
namespace {

absl::StatusOr<Config> Parse(std::vector<std::string> args,
                             std::map<std::string, std::string> env = {}) {
  return ParseConfig(args, [env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

}  // namespace

TEST_CASE("defaults put the socket and database under ./var") {
  auto c = Parse({});
  REQUIRE(c.ok());
  CHECK(c->listen.rfind("unix:///", 0) == 0);
  CHECK(c->listen.find("/var/gpu0.sock") != std::string::npos);
  CHECK(c->db.find("/var/gpu0.db") != std::string::npos);
  CHECK(c->lease_ttl == absl::Seconds(30));
  CHECK(c->min_improvement_bps == 200);
}

TEST_CASE(
    "the Redis front door is off by default, and --redis_listen takes a "
    "comma list and repeats") {
  auto off = Parse({});
  REQUIRE(off.ok());
  CHECK(off->redis_listen.empty());
  auto c = Parse({"--redis_listen=127.0.0.1:6390,unix:/tmp/r.sock",
                  "--redis_listen=127.0.0.1:6391"});
  REQUIRE(c.ok());
  CHECK(c->redis_listen == "127.0.0.1:6390,unix:/tmp/r.sock,127.0.0.1:6391");
  CHECK(c->redis_claim_ttl == absl::Minutes(10));
  CHECK(c->redis_wait == absl::Minutes(10));
}

// A test name must not start with "-": Catch would read it as an option.
TEST_CASE("redis_max_value is 8 MiB by default and at most 32 MiB") {
  auto c = Parse({});
  REQUIRE(c.ok());
  CHECK(c->redis_max_value == 8 << 20);
  CHECK(Parse({"--redis_max_value=33554432"}).ok());
  auto over = Parse({"--redis_max_value=33554433"});
  REQUIRE_FALSE(over.ok());
  CHECK(over.status().message().find("redis_max_value") != std::string::npos);
}

TEST_CASE("a --redis_claim_ttl beyond --max_lease_ttl is refused") {
  auto c = Parse({"--redis_claim_ttl=2h"});
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("--redis_claim_ttl") != std::string::npos);
  CHECK(Parse({"--redis_claim_ttl=2h", "--max_lease_ttl=3h"}).ok());
}

TEST_CASE("under systemd the runtime and state directories are used") {
  auto c = Parse({"--device=3"}, {{"RUNTIME_DIRECTORY", "/run/gputuned"},
                                  {"STATE_DIRECTORY", "/var/lib/gputuned"}});
  REQUIRE(c.ok());
  CHECK(c->listen == "unix:///run/gputuned/gpu3.sock");
  CHECK(c->db == "/var/lib/gputuned/gpu3.db");
}

TEST_CASE("flags override the config file, which overrides defaults") {
  char tmpl[] = "/tmp/gputune-conf-XXXXXX";
  const int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  std::ofstream(tmpl) << "# comment\nlease_ttl = 10s\nlog_level = debug\n";
  auto c = Parse({std::string("--config=") + tmpl, "--log-level=warn"});
  REQUIRE(c.ok());
  CHECK(c->lease_ttl == absl::Seconds(10));
  CHECK(c->log_level == "warn");
  unlink(tmpl);
}

TEST_CASE("bad settings are refused with the flag or file line named") {
  CHECK(std::string(Parse({"--lease_ttl=soon"}).status().message())
            .find("--lease_ttl=soon") != std::string::npos);
  CHECK(
      std::string(Parse({"--backend=tpu"}).status().message()).find("one of") !=
      std::string::npos);
  CHECK(std::string(Parse({"--nope=1"}).status().message())
            .find("unknown flag --nope") != std::string::npos);
  CHECK(std::string(Parse({"positional"}).status().message())
            .find("unexpected argument") != std::string::npos);
  char tmpl[] = "/tmp/gputune-conf-XXXXXX";
  REQUIRE(mkstemp(tmpl) >= 0);
  std::ofstream(tmpl) << "lease_ttl = 1s\nbogus = 1\n";
  CHECK(std::string(Parse({std::string("--config=") + tmpl}).status().message())
            .find(":2: unknown setting 'bogus'") != std::string::npos);
  unlink(tmpl);
}

TEST_CASE("a unix listen address without a path is refused, not thrown") {
  // Found by the config_file fuzz target: std::filesystem::absolute("")
  // threw, and gputuned died of an uncaught exception.
  for (const char* listen : {"--listen=unix:", "--listen=unix://"}) {
    INFO(listen);
    auto c = Parse({listen});
    REQUIRE(c.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(c.status().message().find("needs a path") != absl::string_view::npos);
  }
}

TEST_CASE("the fleet connection string comes from a flag or the config file") {
  CHECK(Parse({})->fleet.empty());  // no fleet unless asked
  char tmpl[] = "/tmp/gputune-conf-XXXXXX";
  REQUIRE(mkstemp(tmpl) >= 0);
  std::ofstream(tmpl) << "fleet = host=/run/postgresql dbname=fleet "
                         "sslmode=disable\nfleet_lease_ttl = 5s\n";
  auto c = Parse({std::string("--config=") + tmpl});
  REQUIRE(c.ok());
  CHECK(c->fleet == "host=/run/postgresql dbname=fleet sslmode=disable");
  CHECK(c->fleet_lease_ttl == absl::Seconds(5));
  auto flag = Parse({std::string("--config=") + tmpl,
                     "--fleet=postgresql://db.example.net/fleet"});
  REQUIRE(flag.ok());
  CHECK(flag->fleet == "postgresql://db.example.net/fleet");
  CHECK(Parse({"--fleet_claim_timeout=5s"})->fleet_claim_timeout ==
        absl::Seconds(5));
  CHECK(std::string(Parse({"--fleet_claim_timeout=10ms"}).status().message())
            .find("--fleet_claim_timeout") != std::string::npos);
  CHECK(std::string(Parse({"--fleet_lease_ttl=100ms"}).status().message())
            .find("--fleet_lease_ttl") != std::string::npos);
  unlink(tmpl);
}

TEST_CASE("the help text lists every setting with its default") {
  const std::string help = ConfigHelp();
  CHECK(help.find("--lease_ttl") != std::string::npos);
  CHECK(help.find("[default: 30s]") != std::string::npos);
  // The two flags that are not settings are listed too.
  CHECK(help.find("\n  --help\n") != std::string::npos);
  CHECK(help.find("\n  --version\n      print the version, the git revision "
                  "and the backends built") != std::string::npos);
}

}  // namespace gputune

namespace gputune {

TEST_CASE("the hardening settings parse, and TLS files go together") {
  auto c = Parse({"--admin_group=wheel", "--allow_insecure_tcp",
                  "--max_connection_idle=30s", "--tls_cert_file=/c.pem",
                  "--tls_key_file=/k.pem"});
  REQUIRE(c.ok());
  CHECK(c->admin_group == "wheel");
  CHECK(c->allow_insecure_tcp);
  CHECK(c->max_connection_idle == absl::Seconds(30));
  CHECK(c->tls_cert_file == "/c.pem");
  const Config defaults;
  CHECK_FALSE(defaults.allow_insecure_tcp);
  CHECK(defaults.max_connection_idle == absl::Minutes(10));
  auto half = Parse({"--tls_cert_file=/c.pem"});
  REQUIRE_FALSE(half.ok());
  CHECK(std::string(half.status().message()).find("--tls_key_file") !=
        std::string::npos);
}

TEST_CASE("a --device_uuid must be usable as a file name") {
  CHECK(Parse({"--device_uuid=GPU-8f3c1d2e"})->device_uuid == "GPU-8f3c1d2e");
  auto bad = Parse({"--device_uuid=../../etc/x"});
  REQUIRE(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("--device_uuid") !=
        std::string::npos);
}

}  // namespace gputune
