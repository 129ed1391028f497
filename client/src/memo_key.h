// MemoKey: a tune key (with its candidate set) as a hash-map key, looked up
// without building a string: a KeyView borrows the fields of a v1::Key, so a
// memo hit allocates nothing.
//
// The hash is the memo's own (HashKey below), not absl::Hash over the
// fields: hashing is the largest cost of a memo hit that does not depend on
// the cache: absl's combine of the eight fields ran ~140 instructions a
// key under callgrind, and HashKey takes a memo hit from ~610 instructions
// to ~534 (a memo-only driver under callgrind, commit a4cd3d5). The keys
// are the process's own (this is the client's memo, not the daemon's
// index), so resistance to crafted collisions is not needed; an even spread
// is, and the memo's tests check it.
#ifndef GPUTUNE_CLIENT_SRC_MEMO_KEY_H_
#define GPUTUNE_CLIENT_SRC_MEMO_KEY_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"
#include "proto/key_view.h"

namespace gputune::client_internal {

using gputune::KeyView;

namespace memo_hash {

// A multiply-fold mix in the manner of wyhash: the 128-bit product of two
// words, its halves xor-ed.
inline uint64_t Mum(uint64_t a, uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<uint64_t>(r) ^ static_cast<uint64_t>(r >> 64);
}
inline uint64_t Read8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline uint64_t Read4(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr uint64_t kP0 = 0xa0761d6478bd642full;
constexpr uint64_t kP1 = 0xe7037ed1a0b428dbull;
constexpr uint64_t kP2 = 0x8ebc6af09c88c6e3ull;
constexpr uint64_t kP3 = 0x589965cc75374cc3ull;

// `h` with every byte of `s` and its length folded in. Strings of up to 16
// bytes (roles, candidate sets) take two overlapping reads and one mix.
inline uint64_t Fold(uint64_t h, absl::string_view s) {
  const char* p = s.data();
  const size_t n = s.size();
  uint64_t a = 0, b = 0;
  if (n >= 4 && n <= 16) {
    const size_t q = (n >> 3) << 2;  // 4 from 8 bytes on: all bytes read
    a = Read4(p) << 32 | Read4(p + q);
    b = Read4(p + n - 4) << 32 | Read4(p + n - 4 - q);
  } else if (n > 0 && n < 4) {
    a = uint64_t{static_cast<uint8_t>(p[0])} << 16 |
        uint64_t{static_cast<uint8_t>(p[n >> 1])} << 8 |
        static_cast<uint8_t>(p[n - 1]);
  } else if (n > 16) {
    size_t left = n;
    for (; left > 16; left -= 16, p += 16) {
      h = Mum(Read8(p) ^ kP1, Read8(p + 8) ^ h);
    }
    a = Read8(s.data() + n - 16);
    b = Read8(s.data() + n - 8);
  }
  return Mum(a ^ kP1 ^ n, b ^ h ^ kP2);
}

}  // namespace memo_hash

// The memo's hash of a key: every field of the view.
inline size_t HashKey(const KeyView& v) {
  using memo_hash::Fold;
  using memo_hash::Mum;
  uint64_t h =
      Mum((uint64_t{v.m} | uint64_t{v.k} << 32) ^ memo_hash::kP0,
          (uint64_t{v.n} | uint64_t{static_cast<uint32_t>(v.phase)} << 32) ^
              (memo_hash::kP3 + static_cast<uint64_t>(v.op)));
  h = Fold(h, v.name);
  h = Fold(h, v.params);
  h = Fold(h, v.candidate_set);
  return static_cast<size_t>(h);
}

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

// Transparent hash and equality: a map keyed by MemoKey (or by a pointer to
// one held elsewhere) is searched with a KeyView.
struct MemoKeyHash {
  using is_transparent = void;
  size_t operator()(const KeyView& v) const { return HashKey(v); }
  size_t operator()(const MemoKey& k) const { return HashKey(k.View()); }
  size_t operator()(const MemoKey* k) const { return HashKey(k->View()); }
};
struct MemoKeyEq {
  using is_transparent = void;
  static KeyView V(const KeyView& v) { return v; }
  static KeyView V(const MemoKey& k) { return k.View(); }
  static KeyView V(const MemoKey* k) { return k->View(); }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    return V(a) == V(b);
  }
};

}  // namespace gputune::client_internal

#endif  // GPUTUNE_CLIENT_SRC_MEMO_KEY_H_
