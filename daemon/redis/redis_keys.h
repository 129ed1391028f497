// How the Redis front door keeps its keys and values in the tune store: each
// Redis key is an entry of the custom op "redis" (docs/integrations.md), so
// gputunectl list/get/delete/export, grpcurl, the metrics and the fleet tier
// see it like any entry.
//
//   Redis key  "pt2:ab..::k.py:c1"
//   tune key   redis/k=pt2:ab..::k.py:c1@redis   (KeyText)
//   entry      execution.kernel "redis.value", execution.data = the value,
//              execution.params expires_at_ms_hi/_lo when the key has a TTL
//              (unix milliseconds = hi * 2^31 + lo)
//
// Key bytes outside '!'..'~', and '%', '@', are written %XX, so every binary
// key maps to exactly one tune key and back.
#ifndef GPUTUNE_DAEMON_REDIS_REDIS_KEYS_H_
#define GPUTUNE_DAEMON_REDIS_REDIS_KEYS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gputune/v1/tune.pb.h"
#include "proto/validation.h"

namespace gputune::redis {

inline constexpr char kRedisOp[] = "redis";
inline constexpr char kRedisCandidateSet[] = "redis";
inline constexpr const char* kValueKernel = kRedisValueKernel;

// The tune key of a Redis key; OUT_OF_RANGE (with the Redis error line as
// message) when the escaped key does not fit a CustomKey's params.
absl::StatusOr<v1::Key> TuneKeyFor(absl::string_view redis_key);
// KeyId(*TuneKeyFor(redis_key)) into `key_id`, without building the key
// (the read path); false where TuneKeyFor refuses the key.
bool KeyIdFor(absl::string_view redis_key, std::string* key_id);
// The Redis key of a tune key of op "redis"; nullopt for any other key.
std::optional<std::string> RedisKeyOf(const v1::Key& key);

// Whether a value expiring at `expires_at_ms` (unix milliseconds; none:
// never) has expired at `now`.
inline bool ExpiredAt(std::optional<int64_t> expires_at_ms, absl::Time now) {
  return expires_at_ms && *expires_at_ms <= absl::ToUnixMillis(now);
}

// A value as stored.
struct StoredValue {
  std::string value;
  std::optional<int64_t> expires_at_ms;  // unix milliseconds
  bool Expired(absl::Time now) const { return ExpiredAt(expires_at_ms, now); }
};
// The value an entry (full or summary) holds; nullopt when it is not a
// Redis value (another kernel: written by something else).
std::optional<StoredValue> ValueOf(const v1::Entry& entry);
// Its expiry alone (ValueOf(entry)->expires_at_ms, without the value).
std::optional<int64_t> ExpiresAt(const v1::Entry& entry);

// A value read in place from the index: `value` points into `entry`, a
// serialized entry (the summary the arbiter's index shares, never changed),
// which this keeps alive. The read path of GET and MGET: a hit costs no
// parse of the whole entry and no copy but the one into the reply (a full
// parse of a 200-byte value's summary was most of an MGET's time).
struct IndexedValue {
  std::shared_ptr<const std::string> entry;
  absl::string_view value;
  std::optional<int64_t> expires_at_ms;  // unix milliseconds
  bool Expired(absl::Time now) const { return ExpiredAt(expires_at_ms, now); }
};
// What ValueOf answers for the entry `serialized` holds, reading only its
// execution's kernel, data and expiry parameters (protobuf's
// CodedInputStream; the rest of the entry is skipped, not parsed). nullopt
// when it is not a Redis value, or the bytes are not a well-formed entry.
std::optional<IndexedValue> IndexedValueOf(
    std::shared_ptr<const std::string> serialized);
// The entry for a SET: source CLIENT_MEASURED, measured now.
v1::Entry EntryFor(const v1::Key& key, const StoredValue& value, absl::Time now,
                   const v1::Fingerprint& fingerprint,
                   absl::string_view recorded_by);

// The key patterns whose misses are single-flighted (fnmatch(3) globs, as
// Redis's KEYS patterns). A key holding a NUL byte matches none.
class TunedPatterns {
 public:
  explicit TunedPatterns(std::vector<std::string> patterns)
      : patterns_(std::move(patterns)) {}
  bool Matches(absl::string_view redis_key) const;
  const std::vector<std::string>& patterns() const { return patterns_; }

 private:
  std::vector<std::string> patterns_;
};

// Inductor's autotune results ("pt2:<sha256 hex>::<kernel file>:c1", from
// torch/_inductor/remote_cache.py RedisRemoteCache with the
// autotune-best-config-v2 salt) and Triton's
// ("triton:<key>:<fn>.autotune.json", triton.runtime.cache
// RedisRemoteCacheBackend's default key format).
std::vector<std::string> DefaultTunedPatterns();

}  // namespace gputune::redis

#endif  // GPUTUNE_DAEMON_REDIS_REDIS_KEYS_H_
