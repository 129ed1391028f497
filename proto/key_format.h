// Key text: the identity of a tune key as a string, and the text form people
// type (gputunectl get KEY).
//
// Identity (KeyId) leaves candidate_set out: one key has one entry, and the
// entry's candidate set decides HIT or STALE. The text form adds it after '@':
//
//   dense_bf16/decode/attn.qkv/m=1/k=4096/n=6144@cs1
//   my_attention/b=8,h=32,d=128@v3
//
//   absl::StatusOr<v1::Key> key = ParseKeyText("dense_bf16/decode/...@cs1");
//   std::string id = KeyId(*key);   // "dense_bf16/decode/attn.qkv/m=1/..."
#ifndef GPUTUNE_PROTO_KEY_FORMAT_H_
#define GPUTUNE_PROTO_KEY_FORMAT_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gputune/v1/tune.pb.h"
#include "key_view.h"

namespace gputune {

// The built-in op's name.
inline constexpr absl::string_view kDenseOp = "dense_bf16";

// Identity of a valid key (see ValidateKey): op and shape, no candidate set.
std::string KeyId(const v1::Key& key);
// KeyId(key) appended to `out`.
void AppendKeyId(const v1::Key& key, std::string* out);
void AppendKeyId(const KeyView& key, std::string* out);

// The op name of a key: "dense_bf16" or the custom op.
absl::string_view KeyOp(const v1::Key& key);

// KeyId + "@" + candidate_set.
std::string KeyText(const v1::Key& key);

// Parses KeyText's format. Returns INVALID_ARGUMENT naming the part that is
// wrong; the result is validated with ValidateKey.
absl::StatusOr<v1::Key> ParseKeyText(absl::string_view text);

// "prefill" / "decode" / "unspecified".
absl::string_view PhaseName(v1::Phase phase);
// "miss", "pending", "hit", "stale", "backoff".
absl::string_view KeyStateName(v1::KeyState state);

}  // namespace gputune

#endif  // GPUTUNE_PROTO_KEY_FORMAT_H_
