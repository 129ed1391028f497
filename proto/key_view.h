// KeyView: a tune key's fields, borrowed from a v1::Key.
//
// Validation (ValidateKey), identity (AppendKeyId) and the client's memo work
// on a KeyView: one switch over the key's oneof, and the memo finds a key
// without building a string.
//
//   const KeyView view = KeyView::Of(key);
//   if (absl::Status s = ValidateKey(view, "key"); !s.ok()) return s;
//   AppendKeyId(view, &id);
#ifndef GPUTUNE_PROTO_KEY_VIEW_H_
#define GPUTUNE_PROTO_KEY_VIEW_H_

#include <cstdint>
#include <tuple>
#include <utility>

#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"

namespace gputune {

// Borrows from the v1::Key it was made from, which must outlive it.
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
  // Equal views are views of equal keys.
  friend bool operator==(const KeyView& a, const KeyView& b) {
    return a.Tie() == b.Tie();
  }
  template <typename H>
  friend H AbslHashValue(H h, const KeyView& v) {
    return H::combine(std::move(h), v.Tie());
  }
};

}  // namespace gputune

#endif  // GPUTUNE_PROTO_KEY_VIEW_H_
