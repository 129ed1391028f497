// MemoKey: a tune key (with its candidate set) as a hash-map key, looked up
// without building a string: a KeyView borrows the fields of a v1::Key, so a
// memo hit allocates nothing.
#ifndef GPUTUNE_CLIENT_SRC_MEMO_KEY_H_
#define GPUTUNE_CLIENT_SRC_MEMO_KEY_H_

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"

namespace gputune::client_internal {

// Borrows from the v1::Key it was made from.
struct KeyView {
  // dense_bf16: the phase (1, 2); custom ops: 0.
  uint32_t phase = 0;
  uint32_t m = 0, k = 0, n = 0;
  absl::string_view name;    // role (dense) or op (custom)
  absl::string_view params;  // custom params; empty for dense
  absl::string_view candidate_set;

  static KeyView Of(const v1::Key& key) {
    KeyView v;
    if (key.has_dense_bf16()) {
      const v1::DenseBf16Key& d = key.dense_bf16();
      v.phase = static_cast<uint32_t>(d.phase());
      v.m = d.tokens();
      v.k = d.input_features();
      v.n = d.output_features();
      v.name = d.role();
    } else {
      v.name = key.custom().op();
      v.params = key.custom().params();
    }
    v.candidate_set = key.candidate_set();
    return v;
  }
  auto Tie() const {
    return std::make_tuple(phase, m, k, n, name, params, candidate_set);
  }
};

// Owns its strings.
struct MemoKey {
  uint32_t phase = 0;
  uint32_t m = 0, k = 0, n = 0;
  std::string name;
  std::string params;
  std::string candidate_set;

  explicit MemoKey(const KeyView& v)
      : phase(v.phase),
        m(v.m),
        k(v.k),
        n(v.n),
        name(v.name),
        params(v.params),
        candidate_set(v.candidate_set) {}
  KeyView View() const {
    return KeyView{phase, m, k, n, name, params, candidate_set};
  }
};

// Transparent hash and equality: a map keyed by MemoKey is searched with a
// KeyView.
struct MemoKeyHash {
  using is_transparent = void;
  size_t operator()(const KeyView& v) const {
    return absl::Hash<decltype(v.Tie())>()(v.Tie());
  }
  size_t operator()(const MemoKey& k) const { return (*this)(k.View()); }
};
struct MemoKeyEq {
  using is_transparent = void;
  static KeyView V(const KeyView& v) { return v; }
  static KeyView V(const MemoKey& k) { return k.View(); }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return V(a).Tie() == V(b).Tie();
  }
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_MEMO_KEY_H_
