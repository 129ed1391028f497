// proto/key_view.h: a KeyView borrows a Key's fields; validation and
// identity read the same from it as from the Key.
#include "proto/key_view.h"

#include <string>

#include "gputune/v1/tune.pb.h"
#include "proto/key_format.h"
#include "proto/validation.h"
#include "tests/support/catch.h"

namespace gputune {
namespace {

TEST_CASE("a KeyView validates and names a key as its v1::Key does") {
  v1::Key key;
  key.mutable_dense_bf16()->set_phase(v1::PHASE_DECODE);
  key.mutable_dense_bf16()->set_role("attn.qkv");
  key.mutable_dense_bf16()->set_tokens(16);
  key.mutable_dense_bf16()->set_input_features(4096);
  key.mutable_dense_bf16()->set_output_features(6144);
  key.set_candidate_set("cs1");
  const KeyView view = KeyView::Of(key);
  CHECK(view.op == KeyView::Op::kDense);
  CHECK(ValidateKey(view, "key").ok());
  std::string id;
  AppendKeyId(view, &id);
  CHECK(id == "dense_bf16/decode/attn.qkv/m=16/k=4096/n=6144");
  CHECK(id == KeyId(key));
  key.mutable_dense_bf16()->set_tokens(0);
  CHECK(ValidateKey(KeyView::Of(key), "keys[3]").message() ==
        "keys[3].dense_bf16.tokens: must be 1..1048576, got 0");
}

TEST_CASE("keys that differ in any field have views that differ") {
  v1::Key a;
  a.mutable_custom()->set_op("attn");
  a.mutable_custom()->set_params("b=8");
  a.set_candidate_set("cs1");
  v1::Key b = a;
  CHECK(KeyView::Of(a).Tie() == KeyView::Of(b).Tie());
  b.set_candidate_set("cs2");
  CHECK(KeyView::Of(a).Tie() != KeyView::Of(b).Tie());
  b = a;
  b.mutable_custom()->set_params("b=9");
  CHECK(KeyView::Of(a).Tie() != KeyView::Of(b).Tie());
  CHECK(KeyView::Of(v1::Key()).op == KeyView::Op::kNone);
}

}  // namespace
}  // namespace gputune
