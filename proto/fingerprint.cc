#include "fingerprint.h"

#include "absl/strings/str_format.h"

namespace gputune {

std::string FingerprintDigest(const v1::Fingerprint& fp) {
  // Fingerprint has no map fields, so its serialization is canonical.
  const std::string bytes = fp.SerializeAsString();
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace gputune
