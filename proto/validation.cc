#include "validation.h"

#include <array>
#include <cmath>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "key_format.h"

namespace gputune {
namespace {

// A field's path as a parent and a literal tail ("key", ".dense_bf16.role"),
// joined only when a message needs it: validation runs on every Lookup, and
// a valid request should not pay for building field names.
struct Field {
  Field(absl::string_view base, absl::string_view tail = "")
      : base(base), tail(tail) {}
  absl::string_view base;
  absl::string_view tail;
};

// Messages are built out of line: the checks below stay small enough to be
// inlined into ValidateKey, which runs on both sides for every key of a
// BatchLookup.
ABSL_ATTRIBUTE_NOINLINE absl::Status Invalid(const Field& field,
                                             absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(field.base, field.tail, ": ", what));
}

ABSL_ATTRIBUTE_NOINLINE absl::Status TooLong(const Field& field, size_t max,
                                             size_t size) {
  return Invalid(
      field, absl::StrCat("must be at most ", max, " characters, got ", size));
}

ABSL_ATTRIBUTE_NOINLINE absl::Status NotOnly(const Field& field,
                                             absl::string_view allowed) {
  return Invalid(field, absl::StrCat("must contain only ", allowed));
}

ABSL_ATTRIBUTE_NOINLINE absl::Status DimOutOfRange(const Field& field,
                                                   uint32_t value) {
  return Invalid(field,
                 absl::StrCat("must be 1..", kMaxDimension, ", got ", value));
}

// [A-Za-z0-9._-], by table: one load a character instead of six
// comparisons.
constexpr std::array<bool, 256> kNameChars = [] {
  std::array<bool, 256> table{};
  for (int c = 0; c < 256; ++c) {
    table[c] = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
               (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  }
  return table;
}();

bool IsNameChar(char c) { return kNameChars[static_cast<unsigned char>(c)]; }

// 1..max characters, each accepted by `ok`.
template <typename CharOk>
ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status CheckText(
    absl::string_view value, const Field& field, size_t max, CharOk ok,
    absl::string_view allowed) {
  if (value.empty()) return Invalid(field, "must not be empty");
  if (value.size() > max) return TooLong(field, max, value.size());
  for (char c : value) {
    if (!ok(c)) return NotOnly(field, allowed);
  }
  return absl::OkStatus();
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status CheckName(
    absl::string_view value, const Field& field) {
  // A lambda, not the function itself: CheckText is then inlined per
  // character (validation runs on every key of a BatchLookup).
  return CheckText(
      value, field, kMaxNameLength, [](char c) { return IsNameChar(c); },
      "[A-Za-z0-9._-]");
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline absl::Status CheckDim(uint32_t value,
                                                          const Field& field) {
  if (value == 0 || value > kMaxDimension) return DimOutOfRange(field, value);
  return absl::OkStatus();
}

// Protobuf's own bounds (google/protobuf/duration.proto, timestamp.proto).
constexpr int64_t kMaxDurationSeconds = 315576000000;
constexpr int64_t kMinTimestampSeconds = -62135596800;  // 0001-01-01
constexpr int64_t kMaxTimestampSeconds = 253402300799;  // 9999-12-31
constexpr int32_t kMaxNanos = 999999999;

absl::Status CheckDuration(const google::protobuf::Duration& d,
                           const Field& field, bool non_negative = true) {
  const int64_t s = d.seconds();
  const int32_t n = d.nanos();
  if (s < -kMaxDurationSeconds || s > kMaxDurationSeconds || n < -kMaxNanos ||
      n > kMaxNanos || (s > 0 && n < 0) || (s < 0 && n > 0)) {
    return Invalid(
        field,
        absl::StrCat("not a valid duration (seconds ", s, ", nanos ", n,
                     "): seconds must be within +-", kMaxDurationSeconds,
                     ", nanos within +-", kMaxNanos, " with the same sign"));
  }
  if (non_negative && (s < 0 || n < 0)) {
    return Invalid(field, "must be a non-negative duration");
  }
  return absl::OkStatus();
}

absl::Status CheckTimestamp(const google::protobuf::Timestamp& t,
                            const Field& field) {
  if (t.seconds() < kMinTimestampSeconds ||
      t.seconds() > kMaxTimestampSeconds || t.nanos() < 0 ||
      t.nanos() > kMaxNanos) {
    return Invalid(field, absl::StrCat("not a valid timestamp (seconds ",
                                       t.seconds(), ", nanos ", t.nanos(),
                                       "): must lie in years 1..9999 with "
                                       "nanos 0..",
                                       kMaxNanos));
  }
  return absl::OkStatus();
}

// At most max bytes, no control characters (the text reaches logs and
// terminals); empty allowed.
absl::Status CheckFreeText(absl::string_view value, const Field& field,
                           size_t max) {
  if (value.size() > max) return TooLong(field, max, value.size());
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      return Invalid(field, "must not contain control characters");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateKey(const v1::Key& key, absl::string_view field) {
  return ValidateKey(KeyView::Of(key), field);
}

absl::Status ValidateKey(const KeyView& key, absl::string_view field) {
  switch (key.op) {
    case KeyView::Op::kDense: {
      if (key.phase != v1::PHASE_PREFILL && key.phase != v1::PHASE_DECODE) {
        return Invalid({field, ".dense_bf16.phase"},
                       "must be PHASE_PREFILL or PHASE_DECODE");
      }
      if (auto s = CheckName(key.name, {field, ".dense_bf16.role"}); !s.ok()) {
        return s;
      }
      if (auto s = CheckDim(key.m, {field, ".dense_bf16.tokens"}); !s.ok()) {
        return s;
      }
      if (auto s = CheckDim(key.k, {field, ".dense_bf16.input_features"});
          !s.ok()) {
        return s;
      }
      if (auto s = CheckDim(key.n, {field, ".dense_bf16.output_features"});
          !s.ok()) {
        return s;
      }
      break;
    }
    case KeyView::Op::kCustom: {
      if (auto s = CheckName(key.name, {field, ".custom.op"}); !s.ok()) {
        return s;
      }
      if (key.name == kDenseOp) {
        return Invalid({field, ".custom.op"},
                       "'dense_bf16' is the built-in op: use key.dense_bf16");
      }
      if (auto s = CheckText(
              key.params, {field, ".custom.params"}, kMaxParamsLength,
              [](char ch) { return ch >= 0x20 && ch < 0x7f && ch != '@'; },
              "printable ASCII other than '@'");
          !s.ok()) {
        return s;
      }
      break;
    }
    case KeyView::Op::kNone:
      return Invalid(field, "must set dense_bf16 or custom");
  }
  return CheckText(
      key.candidate_set, {field, ".candidate_set"}, kMaxCandidateSetLength,
      [](char c) { return IsNameChar(c) || c == ':' || c == '+'; },
      "[A-Za-z0-9._:+-]");
}

absl::Status ValidateExecution(const v1::Execution& exec,
                               absl::string_view field) {
  if (auto s = CheckText(
          exec.kernel(), {field, ".kernel"}, kMaxNameLength,
          [](char c) { return IsNameChar(c) || c == ':'; }, "[A-Za-z0-9._:-]");
      !s.ok()) {
    return s;
  }
  if (exec.params_size() > static_cast<int>(kMaxExecutionParams)) {
    return Invalid({field, ".params"},
                   absl::StrCat("at most ", kMaxExecutionParams, " entries"));
  }
  for (const auto& [name, value] : exec.params()) {
    if (auto s = CheckName(name, {field, ".params key"}); !s.ok()) {
      return s;
    }
  }
  const size_t max_data = exec.kernel() == kRedisValueKernel
                              ? kMaxRedisValueBytes
                              : kMaxExecutionData;
  if (exec.data().size() > max_data) {
    return Invalid({field, ".data"},
                   absl::StrCat("at most ", max_data, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status ValidateMeasurement(const v1::CandidateMeasurement& m,
                                 absl::string_view field) {
  if (auto s =
          ValidateExecution(m.execution(), absl::StrCat(field, ".execution"));
      !s.ok()) {
    return s;
  }
  if (!v1::Validation_IsValid(m.validation())) {
    return Invalid({field, ".validation"}, "unknown value");
  }
  if (!std::isfinite(m.max_abs_error()) || m.max_abs_error() < 0) {
    return Invalid({field, ".max_abs_error"}, "must be finite and >= 0");
  }
  if (m.error().size() > kMaxReasonLength) {
    return TooLong({field, ".error"}, kMaxReasonLength, m.error().size());
  }
  if (auto s = CheckDuration(m.median(), {field, ".median"}); !s.ok()) {
    return s;
  }
  return CheckDuration(m.spread(), {field, ".spread"});
}

absl::Status ValidateEntry(const v1::Entry& entry, absl::string_view field) {
  if (!entry.has_key()) return Invalid({field, ".key"}, "required");
  if (auto s = ValidateKey(entry.key(), absl::StrCat(field, ".key")); !s.ok()) {
    return s;
  }
  if (!entry.has_execution()) {
    return Invalid({field, ".execution"}, "required");
  }
  if (auto s = ValidateExecution(entry.execution(),
                                 absl::StrCat(field, ".execution"));
      !s.ok()) {
    return s;
  }
  if (entry.measurements_size() > static_cast<int>(kMaxMeasurements)) {
    return Invalid({field, ".measurements"},
                   absl::StrCat("at most ", kMaxMeasurements));
  }
  for (int i = 0; i < entry.measurements_size(); ++i) {
    if (auto s =
            ValidateMeasurement(entry.measurements(i),
                                absl::StrCat(field, ".measurements[", i, "]"));
        !s.ok()) {
      return s;
    }
  }
  if (!v1::Source_IsValid(entry.source())) {
    return Invalid({field, ".source"}, "unknown value");
  }
  if (!std::isfinite(entry.speedup()) || entry.speedup() < 0) {
    return Invalid({field, ".speedup"}, "must be finite and >= 0");
  }
  if (auto s = CheckDuration(entry.default_time(), {field, ".default_time"});
      !s.ok()) {
    return s;
  }
  if (auto s = CheckDuration(entry.chosen_time(), {field, ".chosen_time"});
      !s.ok()) {
    return s;
  }
  if (auto s = CheckTimestamp(entry.measured_at(), {field, ".measured_at"});
      !s.ok()) {
    return s;
  }
  if (auto s = ValidateFingerprint(entry.fingerprint(),
                                   absl::StrCat(field, ".fingerprint"));
      !s.ok()) {
    return s;
  }
  if (auto s = CheckFreeText(entry.recorded_by(), {field, ".recorded_by"},
                             kMaxHolderLength);
      !s.ok()) {
    return s;
  }
  // A Redis value's entry: its value, and as much besides as any entry.
  const size_t max_bytes =
      entry.execution().kernel() == kRedisValueKernel
          ? kMaxEntryBytes + entry.execution().data().size()
          : kMaxEntryBytes;
  if (const size_t size = entry.ByteSizeLong(); size > max_bytes) {
    return Invalid(
        field, absl::StrCat("at most ", max_bytes, " bytes serialized, got ",
                            size, " (fewer measurements, or less data)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateFingerprint(const v1::Fingerprint& fp,
                                 absl::string_view field) {
  const std::pair<const std::string*, const char*> fields[] = {
      {&fp.backend(), ".backend"},
      {&fp.device_name(), ".device_name"},
      {&fp.device_uuid(), ".device_uuid"},
      {&fp.compute_capability(), ".compute_capability"},
      {&fp.driver_version(), ".driver_version"},
      {&fp.runtime_version(), ".runtime_version"},
      {&fp.cublaslt_version(), ".cublaslt_version"},
      {&fp.kernel_version(), ".kernel_version"},
      {&fp.build(), ".build"},
  };
  for (const auto& [value, name] : fields) {
    if (auto s =
            CheckFreeText(*value, {field, name}, kMaxFingerprintFieldLength);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateDuration(const google::protobuf::Duration& d,
                              absl::string_view field, bool non_negative) {
  return CheckDuration(d, field, non_negative);
}

absl::Status ValidateTimestamp(const google::protobuf::Timestamp& t,
                               absl::string_view field) {
  return CheckTimestamp(t, field);
}

absl::Status ValidateHolder(absl::string_view holder, absl::string_view field) {
  return CheckText(
      holder, field, kMaxHolderLength,
      [](char c) { return c >= 0x20 && c < 0x7f; }, "printable ASCII");
}

absl::Status ValidateReason(absl::string_view reason, absl::string_view field) {
  if (reason.size() > kMaxReasonLength) {
    return TooLong(field, kMaxReasonLength, reason.size());
  }
  return absl::OkStatus();
}

absl::Status ValidateFilter(const v1::EntryFilter& filter,
                            absl::string_view field) {
  if (!filter.op().empty()) {
    if (auto s = CheckName(filter.op(), {field, ".op"}); !s.ok()) {
      return s;
    }
  }
  if (!filter.role().empty()) {
    if (auto s = CheckName(filter.role(), {field, ".role"}); !s.ok()) {
      return s;
    }
  }
  if (!v1::Phase_IsValid(filter.phase())) {
    return Invalid({field, ".phase"}, "unknown value");
  }
  if (filter.state() != v1::KEY_STATE_UNSPECIFIED &&
      filter.state() != v1::KEY_STATE_HIT &&
      filter.state() != v1::KEY_STATE_STALE) {
    return Invalid({field, ".state"},
                   "must be KEY_STATE_HIT or KEY_STATE_STALE (entries are "
                   "either)");
  }
  return absl::OkStatus();
}

}  // namespace gputune
