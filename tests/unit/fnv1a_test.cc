// The one hash of gputune's stored and shown digests (proto/fnv1a.h), and
// the digests made with it, pinned: a change to any of them would make
// every cached entry STALE, move a host daemon's identity or void the page
// tokens clients hold.
#include "proto/fnv1a.h"

#include <string>

#include "daemon/device_identity.h"
#include "daemon/page_token.h"
#include "proto/fingerprint.h"
#include "tests/support/catch.h"

namespace gputune {
namespace {

TEST_CASE("FNV-1a gives the reference digests") {
  // The reference's test vectors (32 bits, and 64 bits from its offset
  // basis).
  CHECK(Fnv1a<uint32_t>("") == 0x811c9dc5u);
  CHECK(Fnv1a<uint32_t>("a") == 0xe40c292cu);
  CHECK(Fnv1a<uint32_t>("foobar") == 0xbf9cf968u);
  CHECK(Fnv1a<uint64_t>("a", 0xcbf29ce484222325ull) == 0xaf63dc4c8601ec8cull);
  CHECK(Fnv1a<uint64_t>("foobar", 0xcbf29ce484222325ull) ==
        0x85944171f73967e8ull);
  // gputune's 64-bit start (proto/fnv1a.h says why it is not the
  // reference's).
  CHECK(Fnv1a<uint64_t>("") == 0x14650fb0739d0383ull);
  CHECK(Fnv1a<uint64_t>("a") == 0x44bd8ad473cd9906ull);
  CHECK(Fnv1a<uint64_t>("foobar") == 0x88fad7c0a8ff07f2ull);
  // A digest continues from where another stopped.
  CHECK(Fnv1a<uint64_t>("bar", Fnv1a<uint64_t>("foo")) ==
        Fnv1a<uint64_t>("foobar"));
  static_assert(Fnv1a<uint32_t>("a") == 0xe40c292cu);
}

TEST_CASE("the digests made with FNV-1a stay what they were") {
  v1::Fingerprint fp;
  fp.set_backend("host");
  fp.set_device_name("cpu");
  CHECK(FingerprintDigest(fp) == "1690317acb3b250e");
  CHECK(HostDeviceUuid("machine-a", "0") ==
        "HOST-75eaabf9-8ea7-e4d8-e6f4-0b5f546b44da");
  CHECK(EncodePageToken("dense_bf16/decode/r/m=1/k=8/n=8@c") ==
        "1ZGVuc2VfYmYxNi9kZWNvZGUvci9tPTEvaz04L249OEBjcAY7eA");
}

}  // namespace
}  // namespace gputune
