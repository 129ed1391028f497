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
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::redis {

inline constexpr char kRedisOp[] = "redis";
inline constexpr char kRedisCandidateSet[] = "redis";
inline constexpr char kValueKernel[] = "redis.value";

// The tune key of a Redis key; OUT_OF_RANGE (with the Redis error line as
// message) when the escaped key does not fit a CustomKey's params.
absl::StatusOr<v1::Key> TuneKeyFor(absl::string_view redis_key);
// The Redis key of a tune key of op "redis"; nullopt for any other key.
std::optional<std::string> RedisKeyOf(const v1::Key& key);

// A value as stored.
struct StoredValue {
  std::string value;
  std::optional<int64_t> expires_at_ms;  // unix milliseconds
  bool Expired(absl::Time now) const {
    return expires_at_ms && *expires_at_ms <= absl::ToUnixMillis(now);
  }
};
// The value an entry (full or summary) holds; nullopt when it is not a
// Redis value (another kernel: written by something else).
std::optional<StoredValue> ValueOf(const v1::Entry& entry);
// The same, moving the value out of `entry` (the lookup path: no copy).
std::optional<StoredValue> ValueOf(v1::Entry&& entry);
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
