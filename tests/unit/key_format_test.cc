// Key text and request validation (proto/key_format.h, proto/validation.h).
#include "proto/key_format.h"

#include "proto/fingerprint.h"
#include "proto/validation.h"
#include "tests/support/catch.h"
#include "tests/support/daemon_process.h"

namespace gputune {

using testing::DenseKey;

TEST_CASE("key text round-trips for dense and custom keys") {
  const v1::Key dense = DenseKey(1, 4096, 6144, "cs1", "attn.qkv");
  CHECK(KeyText(dense) == "dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1");
  auto parsed = ParseKeyText(KeyText(dense));
  REQUIRE(parsed.ok());
  CHECK(parsed->SerializeAsString() == dense.SerializeAsString());

  auto custom = ParseKeyText("flash_attn/b=8,h=32,d=128/x@v3");
  REQUIRE(custom.ok());
  CHECK(custom->custom().op() == "flash_attn");
  CHECK(custom->custom().params() == "b=8,h=32,d=128/x");
  CHECK(KeyId(*custom) == "flash_attn/b=8,h=32,d=128/x");
}

TEST_CASE("the candidate set is not part of a key's identity") {
  CHECK(KeyId(DenseKey(1, 8, 8, "a")) == KeyId(DenseKey(1, 8, 8, "b")));
}

TEST_CASE("malformed key text is refused with what is wrong") {
  for (const char* text :
       {"dense_bf16/decode/r/m=1/k=2/n=3", "dense_bf16/warm/r/m=1/k=2/n=3@c",
        "dense_bf16/decode/r/m=1/k=2@c", "dense_bf16/decode/r/m=x/k=2/n=3@c",
        "noslash@c", "dense_bf16/decode/r/m=0/k=2/n=3@c"}) {
    INFO(text);
    auto key = ParseKeyText(text);
    REQUIRE_FALSE(key.ok());
    CHECK(key.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("key validation names the offending field") {
  struct Case {
    std::function<void(v1::Key&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {[](v1::Key& k) { k.clear_op(); }, "key: must set"},
      {[](v1::Key& k) {
         k.mutable_dense_bf16()->set_phase(v1::PHASE_UNSPECIFIED);
       },
       "key.dense_bf16.phase"},
      {[](v1::Key& k) {
         k.mutable_dense_bf16()->set_phase(static_cast<v1::Phase>(7));
       },
       "key.dense_bf16.phase"},
      {[](v1::Key& k) { k.mutable_dense_bf16()->set_role(""); },
       "key.dense_bf16.role"},
      {[](v1::Key& k) {
         k.mutable_dense_bf16()->set_role(std::string(65, 'r'));
       },
       "key.dense_bf16.role"},
      {[](v1::Key& k) { k.mutable_dense_bf16()->set_role("a/b"); },
       "key.dense_bf16.role"},
      {[](v1::Key& k) { k.mutable_dense_bf16()->set_tokens(0); },
       "key.dense_bf16.tokens"},
      {[](v1::Key& k) { k.mutable_dense_bf16()->set_input_features(1u << 21); },
       "key.dense_bf16.input_features"},
      {[](v1::Key& k) { k.mutable_dense_bf16()->set_output_features(0); },
       "key.dense_bf16.output_features"},
      {[](v1::Key& k) { k.set_candidate_set(""); }, "key.candidate_set"},
      {[](v1::Key& k) { k.set_candidate_set("a b"); }, "key.candidate_set"},
      {[](v1::Key& k) { k.mutable_custom()->set_op("dense_bf16"); },
       "key.custom.op"},
      {[](v1::Key& k) {
         k.mutable_custom()->set_op("x");
         k.mutable_custom()->set_params(std::string(1025, 'p'));
       },
       "key.custom.params"},
  };
  for (const Case& c : cases) {
    v1::Key key = DenseKey(1);
    c.mutate(key);
    absl::Status s = ValidateKey(key, "key");
    INFO(c.field << " -> " << s.message());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(s.message()).rfind(c.field, 0) == 0);
  }
  CHECK(ValidateKey(DenseKey(1), "key").ok());
}

TEST_CASE("an imported entry is validated field by field") {
  v1::Entry e;
  *e.mutable_key() = DenseKey(1);
  CHECK(std::string(ValidateEntry(e, "entries[3]").message()) ==
        "entries[3].execution: required");
  e.mutable_execution()->set_kernel("k");
  CHECK(ValidateEntry(e, "e").ok());
  e.add_measurements()->mutable_execution()->set_kernel("");
  CHECK(std::string(ValidateEntry(e, "e").message())
            .rfind("e.measurements[0].execution.kernel", 0) == 0);
}

TEST_CASE("fingerprints differing only in the GPU's UUID are the same target") {
  v1::Fingerprint a;
  a.set_backend("cuda");
  a.set_device_name("NVIDIA H200");
  a.set_device_uuid("GPU-1111");
  a.set_driver_version("580.1");
  v1::Fingerprint b = a;
  b.set_device_uuid("GPU-2222");
  CHECK(FingerprintDigest(a) == FingerprintDigest(b));
  b.set_driver_version("580.2");
  CHECK(FingerprintDigest(a) != FingerprintDigest(b));
}

}  // namespace gputune
