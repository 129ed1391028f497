// GPU UUIDs as text, shared by the daemon (its identity, by-uuid links), the
// CUDA backend and the client library (finding a device's daemon): one
// spelling everywhere, so that a link the daemon makes is the name a client
// looks for.
#ifndef GPUTUNE_PROTO_DEVICE_UUID_H_
#define GPUTUNE_PROTO_DEVICE_UUID_H_

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace gputune {

// 16 bytes (cudaUUID_t, CUuuid) as nvidia-smi prints them: "GPU-8f3c1d2e-
// 5b7d-4c9e-a0f1-2d3e4f5a6b7c".
inline std::string FormatGpuUuid(const unsigned char* b) {
  char out[64];
  std::snprintf(out, sizeof(out),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                "%02x%02x%02x%02x%02x%02x",
                b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9],
                b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

// Whether `uuid` can name a device and a file: 1-64 letters, digits and
// '-', not starting with '-'.
inline bool IsDeviceUuid(absl::string_view uuid) {
  if (uuid.empty() || uuid.size() > 64 || uuid.front() == '-') return false;
  return std::all_of(uuid.begin(), uuid.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-';
  });
}

// "gpu-8F3C..." -> "GPU-8f3c...": the prefix in upper case, the digits in
// lower case, as CUDA, NVML and the driver print them.
inline std::string CanonicalDeviceUuid(absl::string_view uuid) {
  const size_t dash = uuid.find('-');
  if (dash == absl::string_view::npos) return std::string(uuid);
  return absl::StrCat(absl::AsciiStrToUpper(uuid.substr(0, dash)),
                      absl::AsciiStrToLower(uuid.substr(dash)));
}

}  // namespace gputune

#endif  // GPUTUNE_PROTO_DEVICE_UUID_H_
