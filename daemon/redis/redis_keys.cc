#include "daemon/redis/redis_keys.h"

#include <fnmatch.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
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

absl::StatusOr<v1::Key> TuneKeyFor(absl::string_view redis_key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string params(kParamsPrefix);
  for (unsigned char c : redis_key) {
    if (Plain(c)) {
      params.push_back(static_cast<char>(c));
    } else {
      params.push_back('%');
      params.push_back(kHex[c >> 4]);
      params.push_back(kHex[c & 15]);
    }
    if (params.size() > kMaxParamsLength) {
      return absl::OutOfRangeError(absl::StrCat(
          "ERR key is longer than gputune stores (", kMaxParamsLength - 2,
          " bytes, each byte outside '!'..'~' or '%' or '@' counting 3)"));
    }
  }
  v1::Key key;
  key.mutable_custom()->set_op(kRedisOp);
  key.mutable_custom()->set_params(std::move(params));
  key.set_candidate_set(kRedisCandidateSet);
  return key;
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

std::optional<StoredValue> ValueOf(const v1::Entry& entry) {
  return ValueOf(v1::Entry(entry));
}

std::optional<StoredValue> ValueOf(v1::Entry&& entry) {
  if (entry.execution().kernel() != kValueKernel) return std::nullopt;
  StoredValue v;
  v.value = std::move(*entry.mutable_execution()->mutable_data());
  const auto& params = entry.execution().params();
  auto hi = params.find(kExpiryHigh);
  auto lo = params.find(kExpiryLow);
  if (hi != params.end() && lo != params.end() && hi->second >= 0 &&
      lo->second >= 0) {
    v.expires_at_ms = (static_cast<int64_t>(hi->second) << 31) | lo->second;
  }
  return v;
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
