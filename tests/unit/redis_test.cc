// The Redis front door's parts that need no server: the request reader's
// bounds and the mapping of Redis keys and values onto store entries.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/redis/redis_keys.h"
#include "daemon/redis/resp_reader.h"
#include "proto/key_format.h"
#include "proto/validation.h"
#include "tests/support/catch.h"

namespace gputune::redis {
namespace {

using namespace std::string_literals;  // "...\0..."s keeps the NUL

std::vector<RespCommand> ReadAll(RespReader& reader, const std::string& in) {
  REQUIRE(reader.Feed(in.data(), in.size()).ok());
  std::vector<RespCommand> out;
  while (true) {
    auto next = reader.Next();
    REQUIRE(next.ok());
    if (!next->has_value()) return out;
    out.push_back(**next);
  }
}

}  // namespace

TEST_CASE("the request reader turns pipelined arrays into commands") {
  RespReader reader{RespLimits{}};
  const auto commands = ReadAll(
      reader,
      "*2\r\n$3\r\nGET\r\n$1\r\nk\r\n*0\r\n*-1\r\n*3\r\n$3\r\nSET\r\n$0\r\n\r\n"
      "$3\r\na\0b\r\n"s);
  REQUIRE(commands.size() == 2);
  CHECK(commands[0] == RespCommand{"GET", "k"});
  CHECK(commands[1] == RespCommand{"SET", "", std::string("a\0b", 3)});
}

TEST_CASE("a request split anywhere reads the same") {
  const std::string in = "*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\n";
  for (size_t cut = 0; cut <= in.size(); ++cut) {
    RespReader reader{RespLimits{}};
    auto first = ReadAll(reader, in.substr(0, cut));
    auto rest = ReadAll(reader, in.substr(cut));
    first.insert(first.end(), rest.begin(), rest.end());
    REQUIRE(first.size() == 1);
    CHECK(first[0] == RespCommand{"ECHO", "hello"});
  }
}

TEST_CASE("the request reader refuses what is over its bounds") {
  RespLimits limits;
  limits.max_arguments = 4;
  limits.max_bulk_bytes = 8;
  limits.max_command_bytes = 12;
  limits.max_buffered_bytes = 64;
  auto error = [&](const std::string& in) {
    RespReader reader(limits);
    absl::Status fed = reader.Feed(in.data(), in.size());
    if (!fed.ok()) return std::string(fed.message());
    auto next = reader.Next();
    return next.ok() ? std::string("(no error)")
                     : std::string(next.status().message());
  };
  CHECK(error("*5\r\n") == "ERR Protocol error: invalid multibulk length");
  CHECK(error("*1\r\n$9\r\n123456789\r\n") ==
        "ERR Protocol error: invalid bulk length");
  CHECK(error("*2\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n") ==
        "ERR Protocol error: command larger than 12 bytes");
  CHECK(error(std::string(65, '*')).find("bytes of requests waiting") !=
        std::string::npos);
  CHECK(error("*1\r\n:1\r\n") == "ERR Protocol error: expected '$', got ':'");
  CHECK(error("PING\r\n").rfind("ERR Protocol error", 0) == 0);
}

TEST_CASE("every Redis key maps to one valid tune key and back") {
  for (const std::string& k :
       {std::string(""), std::string("pt2:abc::k.py:c1"),
        std::string("sp ace%@\r\n", 10), std::string("\0\xff", 2)}) {
    absl::StatusOr<v1::Key> key = TuneKeyFor(k);
    REQUIRE(key.ok());
    CHECK(ValidateKey(*key, "key").ok());
    CHECK(RedisKeyOf(*key) == k);
    CHECK(ParseKeyText(KeyText(*key)).ok());
  }
  CHECK(KeyText(*TuneKeyFor("a b")) == "redis/k=a%20b@redis");
  CHECK(TuneKeyFor(std::string(1022, 'x')).ok());
  CHECK(TuneKeyFor(std::string(1023, 'x')).status().code() ==
        absl::StatusCode::kOutOfRange);
}

TEST_CASE("a value's expiry is kept in the entry's execution") {
  const v1::Key key = *TuneKeyFor("k");
  const int64_t at = int64_t{1} << 61;  // far beyond int32
  const v1::Entry entry =
      EntryFor(key, StoredValue{"v", at}, absl::FromUnixSeconds(1), {}, "test");
  CHECK(ValidateExecution(entry.execution(), "execution").ok());
  auto value = ValueOf(entry);
  REQUIRE(value.has_value());
  CHECK(value->value == "v");
  CHECK(value->expires_at_ms == at);
  CHECK(!ValueOf(EntryFor(key, StoredValue{"v", std::nullopt},
                          absl::FromUnixSeconds(1), {}, "test"))
             ->expires_at_ms);
}

TEST_CASE(
    "the default tuned patterns are Inductor's and Triton's autotune keys") {
  const TunedPatterns tuned(DefaultTunedPatterns());
  CHECK(tuned.Matches("pt2:" + std::string(64, 'a') + "::cx2.py:c1"));
  CHECK(tuned.Matches("triton:0123abcd:matmul_kernel.autotune.json"));
  CHECK_FALSE(tuned.Matches("pt2:fx-graph-v1::fabc:c1"));
  CHECK_FALSE(tuned.Matches("triton:0123abcd:matmul_kernel.cubin"));
  CHECK_FALSE(tuned.Matches(std::string("triton:\0:x.autotune.json", 24)));
}

}  // namespace gputune::redis
