#include "daemon/redis/redis_keys.h"

#include <fnmatch.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "google/protobuf/io/coded_stream.h"
#include "proto/proto_time.h"
#include "proto/validation.h"

namespace gputune::redis {
namespace {

constexpr absl::string_view kParamsPrefix = "k=";
// The expiry, unix milliseconds = hi * 2^31 + lo: Execution.params are
// int32, and the execution is what the index (an entry's summary) carries.
constexpr char kExpiryHigh[] = "expires_at_ms_hi";
constexpr char kExpiryLow[] = "expires_at_ms_lo";

bool Plain(unsigned char c) {
  return c > ' ' && c < 0x7f && c != '%' && c != '@';
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;  // only upper case is written
}

}  // namespace

namespace {

// Appends the CustomKey params of `redis_key` ("k=" and the key, escaped);
// false when they would be longer than a CustomKey's params may be.
bool AppendParams(absl::string_view redis_key, std::string* out) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const size_t start = out->size();
  out->append(kParamsPrefix.data(), kParamsPrefix.size());
  for (unsigned char c : redis_key) {
    if (Plain(c)) {
      out->push_back(static_cast<char>(c));
    } else {
      out->push_back('%');
      out->push_back(kHex[c >> 4]);
      out->push_back(kHex[c & 15]);
    }
    if (out->size() - start > kMaxParamsLength) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<v1::Key> TuneKeyFor(absl::string_view redis_key) {
  std::string params;
  if (!AppendParams(redis_key, &params)) {
    return absl::OutOfRangeError(absl::StrCat(
        "ERR key is longer than gputune stores (", kMaxParamsLength - 2,
        " bytes, each byte outside '!'..'~' or '%' or '@' counting 3)"));
  }
  v1::Key key;
  key.mutable_custom()->set_op(kRedisOp);
  key.mutable_custom()->set_params(std::move(params));
  key.set_candidate_set(kRedisCandidateSet);
  return key;
}

bool KeyIdFor(absl::string_view redis_key, std::string* key_id) {
  key_id->assign(kRedisOp);
  key_id->push_back('/');  // AppendKeyId's "<op>/<params>"
  return AppendParams(redis_key, key_id);
}

std::optional<std::string> RedisKeyOf(const v1::Key& key) {
  if (!key.has_custom() || key.custom().op() != kRedisOp) return std::nullopt;
  absl::string_view params = key.custom().params();
  if (!absl::ConsumePrefix(&params, kParamsPrefix)) return std::nullopt;
  std::string out;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] != '%') {
      out.push_back(params[i]);
      continue;
    }
    if (i + 2 >= params.size()) return std::nullopt;
    const int hi = HexValue(params[i + 1]);
    const int lo = HexValue(params[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

namespace {

// The expiry the two parameters encode; nullopt when either is missing or
// negative (not written by EntryFor).
std::optional<int64_t> ExpiryOf(std::optional<int32_t> hi,
                                std::optional<int32_t> lo) {
  if (!hi || !lo || *hi < 0 || *lo < 0) return std::nullopt;
  return (static_cast<int64_t>(*hi) << 31) | *lo;
}

}  // namespace

std::optional<int64_t> ExpiresAt(const v1::Entry& entry) {
  const auto& params = entry.execution().params();
  auto param = [&params](const char* name) -> std::optional<int32_t> {
    auto it = params.find(name);
    if (it == params.end()) return std::nullopt;
    return it->second;
  };
  return ExpiryOf(param(kExpiryHigh), param(kExpiryLow));
}

std::optional<StoredValue> ValueOf(const v1::Entry& entry) {
  if (entry.execution().kernel() != kValueKernel) return std::nullopt;
  return StoredValue{entry.execution().data(), ExpiresAt(entry)};
}

namespace {

using google::protobuf::io::CodedInputStream;

// Protobuf's wire types (https://protobuf.dev/programming-guides/encoding/).
constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

constexpr uint32_t Tag(int field, uint32_t wire_type) {
  return (static_cast<uint32_t>(field) << 3) | wire_type;
}

// Skips the field whose tag was just read; false for a group (no message of
// tune.proto has one) or input that ends inside the field.
bool SkipField(CodedInputStream& in, uint32_t tag) {
  uint64_t varint = 0;
  uint32_t length = 0;
  switch (tag & 7) {
    case kVarint:
      return in.ReadVarint64(&varint);
    case kFixed64:
      return in.Skip(8);
    case kLengthDelimited:
      return in.ReadVarint32(&length) && in.Skip(static_cast<int>(length));
    case kFixed32:
      return in.Skip(4);
    default:
      return false;
  }
}

// A length-delimited field's bytes, in place: `base` is where `in` started.
bool ReadBytes(CodedInputStream& in, const char* base, absl::string_view* out) {
  uint32_t length = 0;
  if (!in.ReadVarint32(&length)) return false;
  const int at = in.CurrentPosition();
  if (!in.Skip(static_cast<int>(length))) return false;
  *out = absl::string_view(base + at, length);
  return true;
}

// Runs `field(tag)` for each field of the length-delimited message that
// starts at `in`; false when it is malformed or `field` says so.
template <typename Fn>
bool ForEachField(CodedInputStream& in, Fn field) {
  uint32_t length = 0;
  if (!in.ReadVarint32(&length) || length > INT32_MAX) return false;
  const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
  // A limit past the bytes (or past the enclosing message) is cut back to
  // them: the message is cut short.
  if (in.BytesUntilLimit() != static_cast<int>(length)) return false;
  while (const uint32_t tag = in.ReadTag()) {
    if (!field(tag)) return false;
  }
  if (!in.ConsumedEntireMessage()) return false;
  in.PopLimit(limit);
  return true;
}

}  // namespace

std::optional<IndexedValue> IndexedValueOf(
    std::shared_ptr<const std::string> serialized) {
  if (serialized == nullptr || serialized->size() > (size_t{1} << 30)) {
    return std::nullopt;
  }
  const char* base = serialized->data();
  CodedInputStream in(reinterpret_cast<const uint8_t*>(base),
                      static_cast<int>(serialized->size()));
  // Fields as protobuf merges them: the last kernel and data win, and the
  // params map keeps the last value of each name.
  absl::string_view kernel, data;
  std::optional<int32_t> hi, lo;
  auto map_entry = [&]() {  // map<string, int32>: key 1, value 2
    absl::string_view name;
    uint64_t value = 0;
    bool ok = ForEachField(in, [&](uint32_t tag) {
      if (tag == Tag(1, kLengthDelimited)) return ReadBytes(in, base, &name);
      if (tag == Tag(2, kVarint)) return in.ReadVarint64(&value);
      return SkipField(in, tag);
    });
    if (!ok) return false;
    // int32 on the wire: a negative one is sign-extended to 64 bits.
    const auto v = static_cast<int32_t>(static_cast<uint32_t>(value));
    if (name == kExpiryHigh) hi = v;
    if (name == kExpiryLow) lo = v;
    return true;
  };
  auto execution = [&](uint32_t tag) {
    if (tag == Tag(v1::Execution::kKernelFieldNumber, kLengthDelimited)) {
      return ReadBytes(in, base, &kernel);
    }
    if (tag == Tag(v1::Execution::kDataFieldNumber, kLengthDelimited)) {
      return ReadBytes(in, base, &data);
    }
    if (tag == Tag(v1::Execution::kParamsFieldNumber, kLengthDelimited)) {
      return map_entry();
    }
    return SkipField(in, tag);
  };
  while (const uint32_t tag = in.ReadTag()) {
    const bool ok =
        tag == Tag(v1::Entry::kExecutionFieldNumber, kLengthDelimited)
            ? ForEachField(in, execution)
            : SkipField(in, tag);
    if (!ok) return std::nullopt;
  }
  if (!in.ConsumedEntireMessage() || kernel != kValueKernel) {
    return std::nullopt;
  }
  return IndexedValue{std::move(serialized), data, ExpiryOf(hi, lo)};
}

v1::Entry EntryFor(const v1::Key& key, const StoredValue& value, absl::Time now,
                   const v1::Fingerprint& fingerprint,
                   absl::string_view recorded_by) {
  v1::Entry entry;
  *entry.mutable_key() = key;
  entry.mutable_execution()->set_kernel(kValueKernel);
  entry.mutable_execution()->set_data(value.value);
  if (value.expires_at_ms) {
    // Redis's largest expiry (below 2^63 ms) does not fit 62 bits; such a
    // key is kept forever.
    const int64_t at = *value.expires_at_ms;
    if (at >= 0 && at < (int64_t{1} << 62)) {
      auto& params = *entry.mutable_execution()->mutable_params();
      params[kExpiryHigh] = static_cast<int32_t>(at >> 31);
      params[kExpiryLow] = static_cast<int32_t>(at & 0x7fffffff);
    }
  }
  entry.set_source(v1::SOURCE_CLIENT_MEASURED);
  *entry.mutable_measured_at() = ToProto(now);
  *entry.mutable_fingerprint() = fingerprint;
  entry.set_recorded_by(std::string(recorded_by.substr(0, kMaxHolderLength)));
  entry.set_reason("set through the Redis front door");
  return entry;
}

bool TunedPatterns::Matches(absl::string_view redis_key) const {
  if (redis_key.find('\0') != absl::string_view::npos) return false;
  const std::string key(redis_key);
  for (const std::string& p : patterns_) {
    if (fnmatch(p.c_str(), key.c_str(), 0) == 0) return true;
  }
  return false;
}

std::vector<std::string> DefaultTunedPatterns() {
  std::string sha;
  for (int i = 0; i < 64; ++i) sha += "[0-9a-f]";
  return {absl::StrCat("pt2:", sha, "::*:c1"), "triton:*:*.autotune.json"};
}

}  // namespace gputune::redis
