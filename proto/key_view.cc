#include "proto/key_view.h"

#include "proto/wire.h"

namespace gputune {
namespace {

using wire::WireType;

bool IsAscii(absl::string_view text) {
  for (char c : text) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  return true;
}

// Walks a plain message: `read(reader)` takes one field and returns false
// when it is not plain (unknown, or of another wire type); a field seen
// before is not plain either.
template <typename ReadField>
bool ReadPlain(absl::string_view bytes, ReadField read) {
  wire::Reader r(bytes);
  uint32_t seen = 0;  // fields are numbered below 32
  while (r.Next()) {
    if (r.field() >= 32 || (seen & (1u << r.field())) != 0) return false;
    seen |= 1u << r.field();
    if (!read(r)) return false;
  }
  return r.ok();
}

bool ReadPlainDense(absl::string_view bytes, KeyView* out) {
  return ReadPlain(bytes, [out](const wire::Reader& r) {
    if (r.field() == v1::DenseBf16Key::kRoleFieldNumber) {
      if (r.type() != WireType::kBytes || !IsAscii(r.bytes())) return false;
      out->name = r.bytes();
      return true;
    }
    if (r.type() != WireType::kVarint) return false;
    switch (r.field()) {
      case v1::DenseBf16Key::kPhaseFieldNumber:
        out->phase = static_cast<int32_t>(r.number());  // as int32 parses
        return true;
      case v1::DenseBf16Key::kTokensFieldNumber:
        out->m = static_cast<uint32_t>(r.number());
        return true;
      case v1::DenseBf16Key::kInputFeaturesFieldNumber:
        out->k = static_cast<uint32_t>(r.number());
        return true;
      case v1::DenseBf16Key::kOutputFeaturesFieldNumber:
        out->n = static_cast<uint32_t>(r.number());
        return true;
    }
    return false;
  });
}

bool ReadPlainCustom(absl::string_view bytes, KeyView* out) {
  return ReadPlain(bytes, [out](const wire::Reader& r) {
    if (r.type() != WireType::kBytes || !IsAscii(r.bytes())) return false;
    switch (r.field()) {
      case v1::CustomKey::kOpFieldNumber:
        out->name = r.bytes();
        return true;
      case v1::CustomKey::kParamsFieldNumber:
        out->params = r.bytes();
        return true;
    }
    return false;
  });
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

bool ReadPlainKeyView(absl::string_view bytes, KeyView* out) {
  *out = KeyView();
  return ReadPlain(bytes, [out](const wire::Reader& r) {
    if (r.type() != WireType::kBytes) return false;
    switch (r.field()) {
      case v1::Key::kDenseBf16FieldNumber:
        if (out->op != KeyView::Op::kNone) return false;  // both members
        out->op = KeyView::Op::kDense;
        return ReadPlainDense(r.bytes(), out);
      case v1::Key::kCustomFieldNumber:
        if (out->op != KeyView::Op::kNone) return false;
        out->op = KeyView::Op::kCustom;
        return ReadPlainCustom(r.bytes(), out);
      case v1::Key::kCandidateSetFieldNumber:
        if (!IsAscii(r.bytes())) return false;
        out->candidate_set = r.bytes();
        return true;
    }
    return false;
  });
}

v1::Key KeyOf(const KeyView& view) {
  v1::Key key;
  if (view.op == KeyView::Op::kDense) {
    v1::DenseBf16Key* d = key.mutable_dense_bf16();
    d->set_phase(static_cast<v1::Phase>(view.phase));
    d->set_role(std::string(view.name));
    d->set_tokens(view.m);
    d->set_input_features(view.k);
    d->set_output_features(view.n);
  } else if (view.op == KeyView::Op::kCustom) {
    key.mutable_custom()->set_op(std::string(view.name));
    key.mutable_custom()->set_params(std::string(view.params));
  }
  key.set_candidate_set(std::string(view.candidate_set));
  return key;
}

}  // namespace gputune
