#include "fingerprint.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/fnv1a.h"

namespace gputune {

std::string FingerprintDigest(const v1::Fingerprint& fp) {
  // Which physical device of a model measured an entry does not change what
  // is fastest on it: leave the UUID out, so that entries move between GPUs
  // of the same model, driver and libraries (export/import) and stay HITs.
  v1::Fingerprint identity = fp;
  identity.clear_device_uuid();
  // Fingerprint has no map fields, so its serialization is canonical.
  const std::string bytes = identity.SerializeAsString();
  return absl::StrFormat("%016x", Fnv1a<uint64_t>(bytes));
}

std::string DeviceModel(const v1::Fingerprint& fp) {
  // '\n' separates: no field may hold a control character (validation.h).
  return absl::StrCat(fp.backend(), "\n", fp.device_name(), "\n",
                      fp.compute_capability(), "\n", fp.processor_count());
}

}  // namespace gputune
