#include "proto/key_view.h"

#include <cstring>

#include "proto/wire.h"

namespace gputune {
namespace {

using wire::WireType;

bool IsAscii(absl::string_view text) {
  // Eight bytes at a time: no byte may have its high bit set.
  uint64_t bits = 0;
  size_t i = 0;
  for (; i + 8 <= text.size(); i += 8) {
    uint64_t word;
    memcpy(&word, text.data() + i, 8);
    bits |= word;
  }
  for (; i < text.size(); ++i) bits |= static_cast<unsigned char>(text[i]);
  return (bits & 0x8080808080808080ULL) == 0;
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

// An int32 as protobuf writes it: a negative one sign-extended to 64 bits.
uint64_t Int32Varint(int32_t value) {
  return static_cast<uint64_t>(static_cast<int64_t>(value));
}

// Every field number of a Key is below 16: a tag is one byte.
size_t TextSize(absl::string_view value) {
  return value.empty() ? 0 : 1 + wire::VarintSize(value.size()) + value.size();
}
size_t NumberSize(uint64_t value) {
  return value == 0 ? 0 : 1 + wire::VarintSize(value);
}

// The size of the view's op message (dense_bf16 or custom); proto3 leaves
// out fields that hold zero or "".
size_t OpSize(const KeyView& v) {
  if (v.op == KeyView::Op::kDense) {
    return NumberSize(Int32Varint(v.phase)) + TextSize(v.name) +
           NumberSize(v.m) + NumberSize(v.k) + NumberSize(v.n);
  }
  if (v.op == KeyView::Op::kCustom) {
    return TextSize(v.name) + TextSize(v.params);
  }
  return 0;
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

namespace {

// The dense key as serializers write it, fields in number order (what
// nearly every key of a BatchLookup is), read in one straight pass: tags in
// sequence, varints of at most four bytes, lengths of one. False for
// anything else, which ReadPlain then reads; what this accepts, ReadPlain
// reads the same.
bool ReadSerializedDense(absl::string_view bytes, KeyView* out) {
  const uint8_t* p = reinterpret_cast<const uint8_t*>(bytes.data());
  const uint8_t* const end = p + bytes.size();
  auto tag = [&p](const uint8_t* limit, uint32_t field, WireType type) {
    if (p == limit || *p != wire::Tag(field, type)) return false;
    ++p;
    return true;
  };
  auto varint = [&p](const uint8_t* limit, uint32_t* value) {
    uint32_t v = 0;
    for (int shift = 0; shift < 28; shift += 7) {
      if (p == limit) return false;
      const uint8_t byte = *p++;
      v |= static_cast<uint32_t>(byte & 0x7f) << shift;
      if (byte < 0x80) {
        *value = v;
        return true;
      }
    }
    return false;
  };
  auto text = [&p](const uint8_t* limit, absl::string_view* value) {
    if (p == limit || *p >= 0x80 || *p > limit - p - 1) return false;
    const size_t size = *p++;
    *value = absl::string_view(reinterpret_cast<const char*>(p), size);
    p += size;
    return IsAscii(*value);
  };
  uint32_t size = 0;
  if (!tag(end, v1::Key::kDenseBf16FieldNumber, WireType::kBytes) ||
      !varint(end, &size) || size > static_cast<size_t>(end - p)) {
    return false;
  }
  const uint8_t* const dense_end = p + size;
  KeyView view;
  view.op = KeyView::Op::kDense;
  uint32_t phase = 0;
  if (tag(dense_end, v1::DenseBf16Key::kPhaseFieldNumber, WireType::kVarint) &&
      !varint(dense_end, &phase)) {
    return false;
  }
  view.phase = static_cast<int32_t>(phase);
  if (tag(dense_end, v1::DenseBf16Key::kRoleFieldNumber, WireType::kBytes) &&
      !text(dense_end, &view.name)) {
    return false;
  }
  if (tag(dense_end, v1::DenseBf16Key::kTokensFieldNumber, WireType::kVarint) &&
      !varint(dense_end, &view.m)) {
    return false;
  }
  if (tag(dense_end, v1::DenseBf16Key::kInputFeaturesFieldNumber,
          WireType::kVarint) &&
      !varint(dense_end, &view.k)) {
    return false;
  }
  if (tag(dense_end, v1::DenseBf16Key::kOutputFeaturesFieldNumber,
          WireType::kVarint) &&
      !varint(dense_end, &view.n)) {
    return false;
  }
  if (p != dense_end) return false;
  if (tag(end, v1::Key::kCandidateSetFieldNumber, WireType::kBytes) &&
      !text(end, &view.candidate_set)) {
    return false;
  }
  if (p != end) return false;
  *out = view;
  return true;
}

}  // namespace

bool ReadPlainKeyView(absl::string_view bytes, KeyView* out) {
  if (ReadSerializedDense(bytes, out)) return true;
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

size_t AppendKeyField(uint32_t field, const KeyView& view, std::string* out) {
  const size_t op_size = OpSize(view);
  const size_t key_size = (view.op == KeyView::Op::kNone
                               ? 0
                               : 1 + wire::VarintSize(op_size) + op_size) +
                          TextSize(view.candidate_set);
  // Sized once and written through a pointer, as protobuf does: appending
  // field by field took twice as long as protobuf.
  const size_t at = out->size();
  out->resize(at + wire::BytesFieldSize(field, key_size));
  char* p = out->data() + at;
  auto varint = [&p](uint64_t value) { p = wire::WriteVarint(value, p); };
  auto tag = [&varint](uint32_t number, WireType type) {
    varint(wire::Tag(number, type));
  };
  auto text = [&](uint32_t number, absl::string_view value) {
    if (value.empty()) return;
    tag(number, WireType::kBytes);
    varint(value.size());
    memcpy(p, value.data(), value.size());
    p += value.size();
  };
  auto integer = [&](uint32_t number, uint64_t value) {
    if (value == 0) return;
    tag(number, WireType::kVarint);
    varint(value);
  };
  tag(field, WireType::kBytes);
  varint(key_size);
  if (view.op == KeyView::Op::kDense) {
    tag(v1::Key::kDenseBf16FieldNumber, WireType::kBytes);
    varint(op_size);
    integer(v1::DenseBf16Key::kPhaseFieldNumber, Int32Varint(view.phase));
    text(v1::DenseBf16Key::kRoleFieldNumber, view.name);
    integer(v1::DenseBf16Key::kTokensFieldNumber, view.m);
    integer(v1::DenseBf16Key::kInputFeaturesFieldNumber, view.k);
    integer(v1::DenseBf16Key::kOutputFeaturesFieldNumber, view.n);
  } else if (view.op == KeyView::Op::kCustom) {
    tag(v1::Key::kCustomFieldNumber, WireType::kBytes);
    varint(op_size);
    text(v1::CustomKey::kOpFieldNumber, view.name);
    text(v1::CustomKey::kParamsFieldNumber, view.params);
  }
  text(v1::Key::kCandidateSetFieldNumber, view.candidate_set);
  return key_size;
}

}  // namespace gputune
