// proto/wire.h: hand-written protobuf must read and write exactly what the
// generated code does.
#include "proto/wire.h"

#include <string>
#include <vector>

#include "gputune/v1/tune.pb.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune {
namespace {

using testing::DenseKey;

std::vector<std::string> Fields(absl::string_view message, uint32_t field,
                                bool* ok) {
  std::vector<std::string> found;
  *ok = wire::ForEachBytesField(
      message, field, [&](absl::string_view b) { found.emplace_back(b); });
  return found;
}

}  // namespace

TEST_CASE("ForEachBytesField finds each key of a BatchLookupRequest") {
  v1::BatchLookupRequest request;
  for (int i = 1; i <= 3; ++i) *request.add_keys() = DenseKey(i);
  bool ok = false;
  const std::vector<std::string> keys =
      Fields(request.SerializeAsString(),
             v1::BatchLookupRequest::kKeysFieldNumber, &ok);
  CHECK(ok);
  REQUIRE(keys.size() == 3);
  for (int i = 0; i < 3; ++i) {
    CHECK(keys[i] == request.keys(i).SerializeAsString());
  }
}

TEST_CASE("ForEachBytesField skips other fields of every wire type") {
  // A KeyStatus: key (1, bytes), state (2, varint), entry (3, bytes) whose
  // speedup is a fixed64; the walk over field 3 must skip 1 and 2.
  v1::KeyStatus status;
  *status.mutable_key() = DenseKey(7);
  status.set_state(v1::KEY_STATE_HIT);
  status.mutable_entry()->set_speedup(1.5);
  status.mutable_entry()->mutable_execution()->set_kernel("k");
  bool ok = false;
  const std::vector<std::string> entries =
      Fields(status.SerializeAsString(), v1::KeyStatus::kEntryFieldNumber, &ok);
  CHECK(ok);
  REQUIRE(entries.size() == 1);
  CHECK(entries[0] == status.entry().SerializeAsString());
  // Nothing of a field that is absent; an empty message is well formed.
  CHECK(Fields(status.SerializeAsString(), 9, &ok).empty());
  CHECK(ok);
  CHECK(Fields("", 1, &ok).empty());
  CHECK(ok);
}

TEST_CASE("ForEachBytesField refuses malformed input") {
  bool ok = true;
  const std::string key = DenseKey(1).SerializeAsString();
  std::string truncated = "\x0a";
  truncated.push_back(static_cast<char>(key.size()));
  truncated += key.substr(0, key.size() - 1);  // one byte short
  Fields(truncated, 1, &ok);
  CHECK_FALSE(ok);
  Fields(std::string("\x08\x01", 2), 1, &ok);  // field 1 as a varint
  CHECK_FALSE(ok);
  Fields(std::string("\xff\xff\xff", 3), 1, &ok);  // not protobuf
  CHECK_FALSE(ok);
  Fields(std::string("\x00\x01", 2), 1, &ok);  // tag 0
  CHECK_FALSE(ok);
}

TEST_CASE("AppendBytesField and AppendVarintField write what protobuf does") {
  v1::KeyStatus status;
  *status.mutable_key() = DenseKey(3);
  status.set_state(v1::KEY_STATE_HIT);
  v1::Entry entry;
  entry.mutable_execution()->set_kernel(std::string(300, 'k'));  // 2-byte len
  *status.mutable_entry() = entry;
  std::string written;
  wire::AppendBytesField(v1::KeyStatus::kKeyFieldNumber,
                         status.key().SerializeAsString(), &written);
  wire::AppendVarintField(v1::KeyStatus::kStateFieldNumber, status.state(),
                          &written);
  wire::AppendBytesField(v1::KeyStatus::kEntryFieldNumber,
                         entry.SerializeAsString(), &written);
  CHECK(written == status.SerializeAsString());
  // The header and the size agree with a whole field (1- and 2-byte
  // lengths).
  for (size_t length : {5u, 300u}) {
    std::string field;
    wire::AppendBytesField(3, std::string(length, 'x'), &field);
    CHECK(wire::BytesFieldSize(3, length) == field.size());
    std::string header;
    wire::AppendBytesFieldHeader(3, length, &header);
    CHECK(field == header + std::string(length, 'x'));
  }
  std::string big;
  wire::AppendVarintField(20, 1ull << 40, &big);
  v1::GetStatusResponse probe;  // any message: field 20 is unknown there
  CHECK(probe.ParseFromString(big));
}

TEST_CASE("Reader walks every field with its number, type and value") {
  v1::Entry entry;
  entry.mutable_execution()->set_kernel("k");
  entry.set_speedup(1.5);                        // fixed64
  entry.set_source(v1::SOURCE_DAEMON_MEASURED);  // varint
  const std::string bytes = entry.SerializeAsString();
  wire::Reader r(bytes);
  REQUIRE(r.Next());
  CHECK(r.field() == v1::Entry::kExecutionFieldNumber);
  CHECK(r.type() == wire::WireType::kBytes);
  CHECK(r.bytes() == entry.execution().SerializeAsString());
  REQUIRE(r.Next());
  CHECK(r.field() == v1::Entry::kSpeedupFieldNumber);
  CHECK(r.type() == wire::WireType::kFixed64);
  double speedup = 0;
  const uint64_t raw = r.number();
  memcpy(&speedup, &raw, sizeof(speedup));
  CHECK(speedup == 1.5);
  REQUIRE(r.Next());
  CHECK(r.field() == v1::Entry::kSourceFieldNumber);
  CHECK(r.number() == v1::SOURCE_DAEMON_MEASURED);
  CHECK_FALSE(r.Next());
  CHECK(r.ok());
}

TEST_CASE("Reader skips groups whole, nested ones too, as protobuf does") {
  // Field 5 a group holding a varint and a nested group 6; then field 1.
  const std::string bytes("\x2b\x08\x01\x33\x10\x02\x34\x2c\x0a\x01z", 11);
  wire::Reader r(bytes);
  REQUIRE(r.Next());
  CHECK(r.field() == 5);
  CHECK(r.type() == wire::WireType::kStartGroup);
  REQUIRE(r.Next());
  CHECK(r.field() == 1);
  CHECK(r.bytes() == "z");
  CHECK_FALSE(r.Next());
  CHECK(r.ok());
  v1::Execution parsed;  // protobuf reads it too: an unknown group
  CHECK(parsed.ParseFromString(bytes));
  CHECK(parsed.kernel() == "z");
}

TEST_CASE("Reader refuses groups that do not close and bytes cut short") {
  auto walk = [](const std::string& bytes) {
    wire::Reader r(bytes);
    while (r.Next()) {
    }
    return r.ok();
  };
  CHECK_FALSE(walk(std::string("\x2b\x08\x01", 3)));  // no end-group
  CHECK_FALSE(walk(std::string("\x2b\x34", 2)));      // ends group 6
  CHECK_FALSE(walk(std::string("\x2c", 1)));          // a lone end
  CHECK_FALSE(walk(std::string("\x09\x01\x02", 3)));  // fixed64 short
  CHECK_FALSE(walk(std::string("\x0f", 1)));          // wire type 7
  CHECK_FALSE(walk(std::string(11, '\xff')));         // varint too long
  // Nesting deeper than protobuf allows is refused, not recursed into.
  auto nested = [](int depth) {
    return std::string(depth, '\x2b') + std::string(depth, '\x2c');
  };
  CHECK(walk(nested(100)));
  CHECK_FALSE(walk(nested(101)));
  // Tags as protobuf reads them: padded to five bytes at most.
  CHECK(walk(std::string("\x88\x80\x80\x80\x00\x01", 6)));
  CHECK_FALSE(walk(std::string("\x88\x80\x80\x80\x80\x00\x01", 7)));
}

}  // namespace gputune
