// Fingerprint identity: two entries were measured on the same device and
// software exactly when their fingerprints' digests are equal.
#ifndef GPUTUNE_PROTO_FINGERPRINT_H_
#define GPUTUNE_PROTO_FINGERPRINT_H_

#include <string>

#include "gputune/v1/tune.pb.h"

namespace gputune {

// 16 hex digits over every field of the fingerprint.
std::string FingerprintDigest(const v1::Fingerprint& fp);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_FINGERPRINT_H_
