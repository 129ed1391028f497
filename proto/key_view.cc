#include "proto/key_view.h"

namespace gputune {

KeyView KeyView::Of(const v1::Key& key) {
  KeyView v;
  switch (key.op_case()) {
    case v1::Key::kDenseBf16: {
      const v1::DenseBf16Key& d = key.dense_bf16();
      v.op = Op::kDense;
      v.phase = d.phase();
      v.m = d.tokens();
      v.k = d.input_features();
      v.n = d.output_features();
      v.name = d.role();
      break;
    }
    case v1::Key::kCustom:
      v.op = Op::kCustom;
      v.name = key.custom().op();
      v.params = key.custom().params();
      break;
    default:
      break;
  }
  v.candidate_set = key.candidate_set();
  return v;
}

}  // namespace gputune
