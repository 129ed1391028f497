// FNV-1a (Fowler-Noll-Vo, variant 1a), 32 and 64 bits: the one hash of
// gputune's digests that are stored or shown, so they must be the same on
// every host, build and version - fingerprint digests (proto/fingerprint.h),
// host device UUIDs (daemon/device_identity.h), ListEntries page-token
// checksums (daemon/page_token.h) and gputunectl's digest of a tool file's
// metadata. Not cryptographic: it detects accidents, not forgeries.
//
//   uint64_t digest = Fnv1a<uint64_t>(bytes);
//   uint32_t checksum = Fnv1a<uint32_t>(bytes);
#ifndef GPUTUNE_PROTO_FNV1A_H_
#define GPUTUNE_PROTO_FNV1A_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace gputune {

// FNV's offset basis and prime for a digest of `Word`'s width (32 or 64
// bits; the reference's other widths are not used).
template <typename Word>
struct FnvParameters;
template <>
struct FnvParameters<uint32_t> {
  static constexpr uint32_t kOffsetBasis = 2166136261u;  // the reference's
  static constexpr uint32_t kPrime = 16777619u;
};
template <>
struct FnvParameters<uint64_t> {
  // Not the reference's 14695981039346656037 (0xcbf29ce484222325): its last
  // digit was lost when the first digest was written, and every digest
  // stored since (entries' fingerprint digests and candidate sets, host
  // device UUIDs) was made with this one. Changing it would make every
  // cached entry STALE; any start is as good a hash.
  static constexpr uint64_t kOffsetBasis = 1469598103934665603ull;
  static constexpr uint64_t kPrime = 1099511628211ull;  // the reference's
};

// FNV-1a of `bytes`, starting from `h`: the offset basis gives the standard
// digest; another start gives a second, independent one of the same bytes
// (HostDeviceUuid takes two for 128 bits).
template <typename Word>
constexpr Word Fnv1a(absl::string_view bytes,
                     Word h = FnvParameters<Word>::kOffsetBasis) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= FnvParameters<Word>::kPrime;
  }
  return h;
}

}  // namespace gputune

#endif  // GPUTUNE_PROTO_FNV1A_H_
