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
#include "proto/key_view.h"

namespace gputune::client_internal {

using gputune::KeyView;

// Owns its strings.
struct MemoKey {
  KeyView::Op op = KeyView::Op::kNone;
  int32_t phase = 0;
  uint32_t m = 0, k = 0, n = 0;
  std::string name;
  std::string params;
  std::string candidate_set;

  explicit MemoKey(const KeyView& v)
      : op(v.op),
        phase(v.phase),
        m(v.m),
        k(v.k),
        n(v.n),
        name(v.name),
        params(v.params),
        candidate_set(v.candidate_set) {}
  KeyView View() const {
    return KeyView{op, phase, m, k, n, name, params, candidate_set};
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
