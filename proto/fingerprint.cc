#include "fingerprint.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gputune {

std::string FingerprintDigest(const v1::Fingerprint& fp) {
  // Which physical device of a model measured an entry does not change what
  // is fastest on it: leave the UUID out, so that entries move between GPUs
  // of the same model, driver and libraries (export/import) and stay HITs.
  v1::Fingerprint identity = fp;
  identity.clear_device_uuid();
  // Fingerprint has no map fields, so its serialization is canonical.
  const std::string bytes = identity.SerializeAsString();
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return absl::StrFormat("%016x", h);
}

std::string DeviceModel(const v1::Fingerprint& fp) {
  // '\n' separates: no field may hold a control character (validation.h).
  return absl::StrCat(fp.backend(), "\n", fp.device_name(), "\n",
                      fp.compute_capability(), "\n", fp.processor_count());
}

}  // namespace gputune
