// Fingerprint identity: two entries were measured on the same kind of device
// and software exactly when their fingerprints' digests are equal. The
// device UUID is kept in entries for provenance but is not part of the
// digest: another GPU of the same model, driver and libraries is the same
// tuning target.
#ifndef GPUTUNE_PROTO_FINGERPRINT_H_
#define GPUTUNE_PROTO_FINGERPRINT_H_

#include <string>

#include "gputune/v1/tune.pb.h"

namespace gputune {

// 16 hex digits over every field of the fingerprint but device_uuid.
std::string FingerprintDigest(const v1::Fingerprint& fp);

// The device model a fingerprint names: backend, device name, compute
// capability and processor count (not the driver, CUDA, cuBLASLt, kernel or
// build versions, which an upgrade changes). Two fingerprints of one model
// with different digests are the same device after a software upgrade: its
// entries are stale-but-usable (docs/architecture.md, "Stale while
// revalidate").
std::string DeviceModel(const v1::Fingerprint& fp);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_FINGERPRINT_H_
