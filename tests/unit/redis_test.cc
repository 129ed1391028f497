// The Redis front door's parts that need no server: the request reader's
// bounds and the mapping of Redis keys and values onto store entries.
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "daemon/redis/redis_keys.h"
#include "daemon/redis/resp_reader.h"
#include "proto/entry_summary.h"
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
  const std::string in = "GET k\r\n*2\r\n$4\r\nECHO\r\n$5\r\nhello\r\nPING\n";
  for (size_t cut = 0; cut <= in.size(); ++cut) {
    RespReader reader{RespLimits{}};
    auto first = ReadAll(reader, in.substr(0, cut));
    auto rest = ReadAll(reader, in.substr(cut));
    first.insert(first.end(), rest.begin(), rest.end());
    REQUIRE(first.size() == 3);
    CHECK(first[0] == RespCommand{"GET", "k"});
    CHECK(first[1] == RespCommand{"ECHO", "hello"});
    CHECK(first[2] == RespCommand{"PING"});
  }
}

TEST_CASE("inline commands read as Redis reads them, between arrays") {
  RespReader reader{RespLimits{}};
  const auto commands = ReadAll(
      reader, "PING\r\nGET  k\n\r\n \t \r\n*1\r\n$4\r\nPING\r\nSET a\tb\r\n");
  REQUIRE(commands.size() == 4);
  CHECK(commands[0] == RespCommand{"PING"});
  CHECK(commands[1] == RespCommand{"GET", "k"});  // blank lines skipped
  CHECK(commands[2] == RespCommand{"PING"});
  CHECK(commands[3] == RespCommand{"SET", "a", "b"});
  // A long telnet session: every line read, none left over.
  for (int i = 0; i < 5000; ++i) {
    const auto more = ReadAll(reader, "ECHO x\r\n");
    REQUIRE(more.size() == 1);
    CHECK(reader.buffered() == 0);
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
  // Inline commands: the same bounds, and no quotes.
  CHECK(error("GET 123456789\r\n") ==
        "ERR Protocol error: invalid bulk length");
  CHECK(error("a b c d e\r\n") ==
        "ERR Protocol error: invalid multibulk length");
  CHECK(error("SET \"k\" v\r\n").rfind("ERR Protocol error: quotes", 0) == 0);
  CHECK(error("SET 'k' v\r\n").rfind("ERR Protocol error: quotes", 0) == 0);
  RespReader reader{RespLimits{}};
  const std::string line(RespReader::kMaxInlineBytes + 1, 'x');  // no newline
  REQUIRE(reader.Feed(line.data(), line.size()).ok());
  auto next = reader.Next();
  REQUIRE(!next.ok());
  CHECK(next.status().message() ==
        "ERR Protocol error: too big inline request");
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
    std::string id = "left over";
    REQUIRE(KeyIdFor(k, &id));
    CHECK(id == KeyId(*key));
  }
  std::string id;
  CHECK(KeyIdFor(std::string(1022, 'x'), &id));
  CHECK_FALSE(KeyIdFor(std::string(1023, 'x'), &id));
  CHECK_FALSE(KeyIdFor(std::string(341, '\0'), &id));  // 3 bytes each
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

namespace {
// IndexedValueOf(bytes) agrees with protobuf's full parse of them. Not
// `strict`: only a value both find must agree (protobuf also checks UTF-8
// and skips groups, which the in-place read need not: the index holds what
// the daemon serialized).
void CheckReadsAsParsed(const std::string& bytes, bool strict) {
  const std::optional<IndexedValue> in_place =
      IndexedValueOf(std::make_shared<const std::string>(bytes));
  v1::Entry parsed;
  const bool parses = parsed.ParseFromString(bytes);
  const std::optional<StoredValue> full =
      parses ? ValueOf(parsed) : std::nullopt;
  INFO("bytes: " << bytes.size() << ", parses: " << parses);
  if (strict) REQUIRE(in_place.has_value() == full.has_value());
  if (!in_place || !full) return;
  CHECK(in_place->value == full->value);
  CHECK(in_place->expires_at_ms == full->expires_at_ms);
}
}  // namespace

TEST_CASE("a value is read in place from an entry as protobuf parses it") {
  const v1::Key key = *TuneKeyFor("triton:abc:k.cubin");
  std::string binary;
  for (int i = 0; i < 2560; ++i) binary.push_back(static_cast<char>(i));
  for (const std::string& value :
       {std::string(), std::string("v"), binary, std::string(5 << 20, 'x')}) {
    for (std::optional<int64_t> at :
         {std::optional<int64_t>(), std::optional<int64_t>(1),
          std::optional<int64_t>(int64_t{1} << 61)}) {
      const v1::Entry entry = EntryFor(key, StoredValue{value, at},
                                       absl::FromUnixSeconds(1), {}, "test");
      for (const std::string& bytes :
           {SerializedEntrySummary(entry), entry.SerializeAsString()}) {
        const std::optional<IndexedValue> v =
            IndexedValueOf(std::make_shared<const std::string>(bytes));
        REQUIRE(v.has_value());
        CHECK(v->value == value);
        CHECK(v->expires_at_ms == at);
      }
    }
  }
  v1::Entry other = EntryFor(key, StoredValue{"v", std::nullopt},
                             absl::FromUnixSeconds(1), {}, "test");
  other.mutable_execution()->set_kernel("cublaslt");
  CHECK(!IndexedValueOf(
             std::make_shared<const std::string>(other.SerializeAsString()))
             .has_value());
  CHECK(!IndexedValueOf(nullptr).has_value());
}

TEST_CASE("a damaged or merged entry reads in place as protobuf parses it") {
  const v1::Entry a = EntryFor(*TuneKeyFor("k"), StoredValue{"first", 77},
                               absl::FromUnixSeconds(1), {}, "test");
  const v1::Entry b = EntryFor(*TuneKeyFor("k"), StoredValue{"second", 99},
                               absl::FromUnixSeconds(2), {}, "test");
  const std::string bytes = SerializedEntrySummary(a);
  // Every prefix (most are cut inside a field), every byte changed.
  for (size_t n = 0; n <= bytes.size(); ++n) {
    CheckReadsAsParsed(bytes.substr(0, n), /*strict=*/true);
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char flip : {0x01, 0x80, 0xff}) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ flip);
      CheckReadsAsParsed(damaged, /*strict=*/false);
    }
  }
  // Two entries back to back merge: the later data and expiry win.
  CheckReadsAsParsed(bytes + SerializedEntrySummary(b), /*strict=*/true);
  CHECK(IndexedValueOf(std::make_shared<const std::string>(
                           bytes + SerializedEntrySummary(b)))
            ->value == "second");
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
