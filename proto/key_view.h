// KeyView: a tune key's fields, borrowed from a v1::Key or read straight
// from its serialized bytes.
//
// Validation (ValidateKey), identity (AppendKeyId) and the client's memo all
// work on a KeyView, so the daemon can answer a BatchLookup of 10,000 keys
// without building 10,000 Key messages:
//
//   KeyView view;
//   v1::Key parsed;  // only for bytes that are not plain
//   if (!ReadPlainKeyView(key_bytes, &view)) {
//     if (!parsed.ParseFromString(key_bytes)) return Invalid("not a Key");
//     view = KeyView::Of(parsed);
//   }
//   if (absl::Status s = ValidateKey(view, "key"); !s.ok()) return s;
//   AppendKeyId(view, &id);
#ifndef GPUTUNE_PROTO_KEY_VIEW_H_
#define GPUTUNE_PROTO_KEY_VIEW_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>

#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {

// Borrows from the v1::Key or the bytes it was made from.
struct KeyView {
  // Which member of the key's `op` oneof is set.
  enum class Op : uint8_t { kNone, kDense, kCustom };

  Op op = Op::kNone;
  // dense_bf16: the phase as sent (any int32: validation checks it).
  int32_t phase = 0;
  // dense_bf16: tokens (M), input_features (K), output_features (N).
  uint32_t m = 0, k = 0, n = 0;
  absl::string_view name;    // role (dense_bf16) or op (custom)
  absl::string_view params;  // custom params; empty for dense_bf16
  absl::string_view candidate_set;

  static KeyView Of(const v1::Key& key);

  auto Tie() const {
    return std::make_tuple(op, phase, m, k, n, name, params, candidate_set);
  }
};

// Reads a serialized v1::Key into *out in place when its bytes are plain:
// each field at most once and with its own wire type, no unknown fields,
// only one member of the oneof, ASCII strings. That is what any protobuf
// serializer writes for a valid key, and for such bytes *out equals
// KeyView::Of(the key protobuf parses). Returns false for anything else,
// malformed bytes included: parse those with protobuf, which decides.
bool ReadPlainKeyView(absl::string_view bytes, KeyView* out);

// The key a view describes, as a message.
v1::Key KeyOf(const KeyView& view);

// Appends KeyOf(view) as length-delimited field `field` of a message being
// written by hand, in the bytes protobuf writes, straight from the view:
// for the client's BatchLookup, which sends thousands of keys at start-up.
// Returns the size of the key's bytes, the last ones in *out.
size_t AppendKeyField(uint32_t field, const KeyView& view, std::string* out);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_KEY_VIEW_H_
