// Input validation shared by the daemon (every RPC) and the client (before a
// call, so bad input fails fast without I/O).
//
// Every function returns OK or INVALID_ARGUMENT whose message starts with the
// offending field's path (e.g. "key.dense_bf16.tokens: must be 1..1048576,
// got 0"), so a person can fix the request without reading code.
#ifndef GPUTUNE_PROTO_VALIDATION_H_
#define GPUTUNE_PROTO_VALIDATION_H_

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"
#include "key_view.h"

namespace gputune {

// The bounds of every string, bytes and repeated field the daemon stores or
// logs, in one place (tune.proto's comments and docs/api.md quote them).
// Every path that stores a field checks it: Record, ImportEntries, Claim.
inline constexpr uint32_t kMaxDimension = 1u << 20;
inline constexpr size_t kMaxNameLength = 64;  // op, role, kernel, param names
inline constexpr size_t kMaxParamsLength = 1024;  // CustomKey.params
inline constexpr size_t kMaxCandidateSetLength = 128;
inline constexpr size_t kMaxHolderLength =
    256;  // Claim.holder, Entry.recorded_by
inline constexpr size_t kMaxReasonLength =
    1024;  // Abandon.reason, measurement error
inline constexpr size_t kMaxExecutionParams = 64;
inline constexpr size_t kMaxExecutionData = 64 * 1024;  // Execution.data
// Execution.data of a value the Redis front door stores (kernel
// "redis.value", daemon/redis/redis_keys.h): Triton's remote cache keeps
// compiled kernels of several MiB there. gputuned --redis_max_value bounds
// what the door accepts, at most this; an entry holding one may be
// kMaxEntryBytes larger than the value, and still fits a 64 MiB gRPC message.
inline constexpr char kRedisValueKernel[] = "redis.value";
inline constexpr size_t kMaxRedisValueBytes = 32 << 20;
inline constexpr size_t kMaxMeasurements = 1024;
inline constexpr size_t kMaxFingerprintFieldLength = 256;  // each string
// A whole serialized Entry (what one Record or imported entry may store).
inline constexpr size_t kMaxEntryBytes = 1 << 20;
inline constexpr size_t kMaxPathLength = 4096;  // Backup.path
// ListEntries.page_token (see daemon/page_token.h).
inline constexpr size_t kMaxPageTokenLength = 4096;

absl::Status ValidateKey(const v1::Key& key, absl::string_view field);
absl::Status ValidateKey(const KeyView& key, absl::string_view field);
absl::Status ValidateExecution(const v1::Execution& exec,
                               absl::string_view field);
absl::Status ValidateMeasurement(const v1::CandidateMeasurement& m,
                                 absl::string_view field);
// A whole entry, as ImportEntries receives it.
absl::Status ValidateEntry(const v1::Entry& entry, absl::string_view field);
// The device description of an imported entry: every string bounded, no
// control characters.
absl::Status ValidateFingerprint(const v1::Fingerprint& fingerprint,
                                 absl::string_view field);
// A google.protobuf.Duration within protobuf's valid range (seconds within
// +-315,576,000,000, nanos within +-999,999,999 with the same sign) and, when
// non_negative, not negative.
absl::Status ValidateDuration(const google::protobuf::Duration& d,
                              absl::string_view field, bool non_negative);
// A google.protobuf.Timestamp within protobuf's valid range (years 1..9999,
// nanos 0..999,999,999).
absl::Status ValidateTimestamp(const google::protobuf::Timestamp& t,
                               absl::string_view field);
absl::Status ValidateHolder(absl::string_view holder, absl::string_view field);
absl::Status ValidateReason(absl::string_view reason, absl::string_view field);
// A filter's op/role strings (when set) and phase/state enum values.
absl::Status ValidateFilter(const v1::EntryFilter& filter,
                            absl::string_view field);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_VALIDATION_H_
