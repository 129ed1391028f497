#include "proto/key_view.h"

#include "proto/wire.h"

namespace gputune {
namespace {

using wire::WireType;

bool ReadDense(absl::string_view bytes, KeyView* out) {
  wire::Reader r(bytes);
  while (r.Next()) {
    if (r.type() == WireType::kVarint) {
      switch (r.field()) {
        case v1::DenseBf16Key::kPhaseFieldNumber:
          out->phase = static_cast<int32_t>(r.number());  // as int32 parses
          break;
        case v1::DenseBf16Key::kTokensFieldNumber:
          out->m = static_cast<uint32_t>(r.number());
          break;
        case v1::DenseBf16Key::kInputFeaturesFieldNumber:
          out->k = static_cast<uint32_t>(r.number());
          break;
        case v1::DenseBf16Key::kOutputFeaturesFieldNumber:
          out->n = static_cast<uint32_t>(r.number());
          break;
      }
    } else if (r.type() == WireType::kBytes &&
               r.field() == v1::DenseBf16Key::kRoleFieldNumber) {
      out->name = r.bytes();
    }
  }
  return r.ok();
}

bool ReadCustom(absl::string_view bytes, KeyView* out) {
  wire::Reader r(bytes);
  while (r.Next()) {
    if (r.type() != WireType::kBytes) continue;
    if (r.field() == v1::CustomKey::kOpFieldNumber) out->name = r.bytes();
    if (r.field() == v1::CustomKey::kParamsFieldNumber) out->params = r.bytes();
  }
  return r.ok();
}

}  // namespace

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

bool ReadKeyView(absl::string_view bytes, KeyView* out) {
  *out = KeyView();
  wire::Reader r(bytes);
  while (r.Next()) {
    if (r.type() != WireType::kBytes) continue;
    switch (r.field()) {
      case v1::Key::kDenseBf16FieldNumber:
      case v1::Key::kCustomFieldNumber: {
        const KeyView::Op op = r.field() == v1::Key::kDenseBf16FieldNumber
                                   ? KeyView::Op::kDense
                                   : KeyView::Op::kCustom;
        if (out->op != op) {  // the other member is cleared
          const absl::string_view candidate_set = out->candidate_set;
          *out = KeyView();
          out->op = op;
          out->candidate_set = candidate_set;
        }
        if (!(op == KeyView::Op::kDense ? ReadDense(r.bytes(), out)
                                        : ReadCustom(r.bytes(), out))) {
          return false;
        }
        break;
      }
      case v1::Key::kCandidateSetFieldNumber:
        out->candidate_set = r.bytes();
        break;
    }
  }
  return r.ok();
}

}  // namespace gputune
